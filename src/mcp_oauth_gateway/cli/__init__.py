"""The `mcp-oauth-gateway` command: `serve`, `check`, `idp`, `grants`, `dev-idp` and `demo`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .common import EXIT_INVALID
from .flags import parser

__all__ = ["EXIT_INVALID", "main"]


def cmd_dev_idp(args: argparse.Namespace) -> int:
    """Run the dev identity provider until interrupted."""
    from pathlib import Path

    import uvicorn

    from .. import logs
    from ..devidp import BANNER, DevIdpSettings, create_app
    from ..provider_kinds import ProviderKind

    logs.configure("info")
    keycloak = args.kind is ProviderKind.KEYCLOAK
    port = args.port if args.port is not None else (8180 if keycloak else 9000)
    settings = DevIdpSettings(
        kind=args.kind,
        host=args.host,
        port=port,
        state=Path(args.state) if args.state else None,
        seed_users=args.seed_users,
        access_token_ttl=args.access_token_ttl or (60 if keycloak else 3600),
        migrations_seconds=args.migrations_delay,
        worker_seconds=args.worker_delay,
    )
    app = create_app(settings)
    print(
        BANNER.format(flavour=args.kind.flavour, url=f"http://{args.host}:{port}"),
        file=sys.stderr,
        flush=True,
    )
    uvicorn.run(
        app, host=args.host, port=port, log_config=None, access_log=False, server_header=False
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo until Ctrl-C."""
    from pathlib import Path

    from ..demo.runner import DemoOptions, run_demo

    return run_demo(
        DemoOptions(
            kind=args.kind,
            directory=Path(args.dir).resolve(),
            gateway_port=args.port,
            idp_port=args.idp_port,
            backend_port=args.backend_port,
            notes_port=args.notes_port,
            notes_idp_port=args.notes_idp_port,
        )
    )


def cmd_serve(args: argparse.Namespace) -> int:
    """Serve (serve.py)."""
    from .serve import cmd_serve as run

    return run(args)


def cmd_check(args: argparse.Namespace) -> int:
    """Check configuration and settings (check.py)."""
    from .check import cmd_check as run

    return run(args)


def cmd_grants(args: argparse.Namespace) -> int:
    """List or revoke grants (grants.py)."""
    from .grants import cmd_grants as run

    return run(args)


def cmd_idp(args: argparse.Namespace) -> int:
    """Set up an identity provider (idp/cli.py)."""
    from ..idp.cli import run

    return run(args)


# Each command's module is imported when it runs: `serve` never loads what `check` checks
# with (the Kubernetes client, Redis and upstream OAuth probes), which cost a gateway's every
# start a second and 35 MB.
COMMANDS = {
    "serve": cmd_serve,
    "check": cmd_check,
    "dev-idp": cmd_dev_idp,
    "idp": cmd_idp,
    "grants": cmd_grants,
    "demo": cmd_demo,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script."""
    args = parser().parse_args(argv)
    return COMMANDS[args.command](args)
