"""What a file-mode `serve` loads: not the Kubernetes client (a thousand modules, about 35 MB
of every gateway process and a second of its start), nor what only `check` uses, nor the
provisioning tools behind `idp` (httpx and rich with them: a tenth of a second of every start;
the parser still lists the `idp` commands, from `idp/flags.py`)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
from mcp_oauth_gateway.cli.flags import parser
import mcp_oauth_gateway.cli
import mcp_oauth_gateway.cli.serve
import mcp_oauth_gateway.server
from mcp_oauth_gateway.kube.options import in_cluster_mode
args = parser().parse_args(["serve", "-f", "gateway.yaml"])
assert not in_cluster_mode(args)
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"kubernetes_asyncio", "httpx"})
loaded += sorted(m for m in sys.modules if m in {
    "mcp_oauth_gateway.cli.check",
    "mcp_oauth_gateway.kube.controller", "mcp_oauth_gateway.devidp", "mcp_oauth_gateway.idp.cli",
})
print(",".join(loaded))
"""


def printed(probe: str) -> str:
    """What `probe`, run by a fresh interpreter, printed (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_file_mode_gateway_does_not_load_the_kubernetes_client_or_other_commands():
    assert printed(PROBE) == ""


def test_controller_mode_loads_it_when_it_connects():
    probe = (
        "import sys, asyncio\n"
        "from mcp_oauth_gateway.kube.client import ConnectError, connect\n"
        "try:\n"
        "    asyncio.run(connect('/nonexistent/kubeconfig'))\n"
        "except ConnectError as exc:\n"
        "    print(exc)\n"
        "print('kubernetes_asyncio' in sys.modules)\n"
    )
    out = printed(probe)
    assert "--kubeconfig /nonexistent/kubeconfig" in out
    assert out.endswith("True")


def test_the_command_line_loads_neither_the_control_plane_nor_the_kubernetes_client():
    # `dev-idp`, `idp` and `grants` start from the same parser as `serve`: the control plane
    # (half a second) is loaded by the commands that build a snapshot, when they do.
    probe = (
        "import sys\n"
        "from mcp_oauth_gateway.cli.flags import parser\n"
        "import mcp_oauth_gateway.cli\n"
        "parser().parse_args(['dev-idp', '--flavor', 'keycloak'])\n"
        "heavy = ('mcp_oauth_gateway.controlplane', 'mcp_oauth_gateway.kube.leader', 'aiohttp')\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    assert printed(probe) == ""
