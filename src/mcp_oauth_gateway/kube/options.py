"""`serve`'s controller-mode flags: their definitions, defaults from the pod's environment, and
checks that name the flag and the fix."""

from __future__ import annotations

import argparse
import math
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..controller_name import CONTROLLER_NAME
from ..ip_blocks import IPAddress, parse
from .lease_defaults import DEFAULT_DURATION, DEFAULT_LEASE_NAME

if TYPE_CHECKING:
    from ..controlplane.egress import EgressRules
    from .controller import ControllerOptions

# Set in every pod (the API server's Service); how in-cluster configuration is recognised.
IN_CLUSTER_ENV = "KUBERNETES_SERVICE_HOST"
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"
DNS_NAME = re.compile(rf"{DNS_LABEL}(\.{DNS_LABEL})*")
# Gateway API: a domain-prefixed path, e.g. example.net/gateway-controller.
CONTROLLER_NAME_SHAPE = re.compile(rf"{DNS_LABEL}(\.{DNS_LABEL})*/[A-Za-z0-9/\-._~%!$&'()*+,;=:]+")
MAX_LEASE_DURATION = 300.0


def add_flags(serve: argparse.ArgumentParser) -> None:
    """The controller-mode flags of `serve`."""
    group = serve.add_argument_group(
        "Kubernetes controller mode",
        "read the resources from an API server instead of files, and write their status back",
    )
    group.add_argument(
        "--kubeconfig",
        metavar="PATH",
        help="serve what this cluster's API server holds (instead of -f)",
    )
    group.add_argument(
        "--in-cluster",
        action="store_true",
        help="like --kubeconfig, with the pod's service account (the default in a pod "
        "when no -f is given)",
    )
    group.add_argument(
        "--controller-name",
        default=CONTROLLER_NAME,
        help=f"serve the Gateways of GatewayClasses with this spec.controllerName "
        f"(default {CONTROLLER_NAME})",
    )
    group.add_argument(
        "--cluster-domain",
        default="cluster.local",
        help="Service backendRefs resolve to NAME.NAMESPACE.svc.DOMAIN (default cluster.local)",
    )
    group.add_argument(
        "--lease-namespace",
        default=None,
        help="namespace of the Lease that elects the replica writing status (default: "
        "$POD_NAMESPACE, the pod's namespace, or default)",
    )
    group.add_argument(
        "--lease-duration",
        default=str(DEFAULT_DURATION),
        metavar="SECONDS",
        help="a replica takes the Lease over when its holder has not renewed it for this long "
        f"(default {DEFAULT_DURATION:g})",
    )
    group.add_argument(
        "--allow-hosts",
        action="append",
        default=[],
        metavar="[NAMESPACE=]PATTERN[,...]",
        help="hosts tenants may name themselves (a GatewayBackend's static.host, JWKS, issuer "
        "and Redis URLs, an ExternalName Service's externalName): *, a DNS name, *.DOMAIN, an "
        "address or a CIDR, for one namespace with NAMESPACE=; default none (tenants name "
        "Services). Link-local, cloud metadata and the pod's own addresses are never "
        "reached; loopback only through an entry naming a loopback network",
    )
    group.add_argument(
        "--replicas",
        default=None,
        metavar="N",
        help="how many replicas serve; Broker mode without Redis is accepted only with "
        "--replicas 1 (default: several)",
    )
    _add_secret_flags(group)


def in_cluster_mode(args: argparse.Namespace) -> bool:
    """Whether `serve` reads an API server: asked for, or in a pod with no -f given."""
    if args.kubeconfig or args.in_cluster:
        return True
    return not args.files and bool(os.environ.get(IN_CLUSTER_ENV))


def _lease_namespace(given: str | None) -> str:
    if given:
        return given
    if os.environ.get("POD_NAMESPACE"):
        return os.environ["POD_NAMESPACE"]
    try:
        return NAMESPACE_FILE.read_text().strip() or "default"
    except OSError:
        return "default"


def _check_names(args: argparse.Namespace) -> None:
    if not CONTROLLER_NAME_SHAPE.fullmatch(args.controller_name):
        raise ValueError(
            f"--controller-name {args.controller_name!r} must be a domain-prefixed path such "
            f"as {CONTROLLER_NAME} (Gateway API GatewayClass spec.controllerName)"
        )
    if len(args.cluster_domain) > 253 or not DNS_NAME.fullmatch(args.cluster_domain):
        raise ValueError(
            f"--cluster-domain {args.cluster_domain!r} must be a DNS name such as cluster.local"
        )
    namespace = _lease_namespace(args.lease_namespace)
    if len(namespace) > 63 or not re.fullmatch(DNS_LABEL, namespace):
        raise ValueError(
            f"--lease-namespace {namespace!r} must be a namespace name (lowercase letters, "
            "digits and '-')"
        )


def _check_sources(args: argparse.Namespace) -> None:
    if args.files and (args.kubeconfig or args.in_cluster):
        raise ValueError(
            "-f reads resource files, --kubeconfig/--in-cluster an API server: give one of them"
        )
    if args.kubeconfig and args.in_cluster:
        raise ValueError("--kubeconfig and --in-cluster both name the API server: give one")
    if args.in_cluster and not os.environ.get(IN_CLUSTER_ENV):
        raise ValueError(
            f"--in-cluster: not running in a pod ({IN_CLUSTER_ENV} is not set); "
            "give --kubeconfig PATH instead"
        )
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        raise ValueError(f"--kubeconfig {args.kubeconfig}: no such file")
    if args.workers != 1:
        raise ValueError(
            "--workers applies to resource files; in a cluster run more replicas instead "
            "(each watches the API server and serves on its own)"
        )


def _lease_duration(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 1 <= value <= MAX_LEASE_DURATION:
        raise ValueError(
            f"--lease-duration must be a number of seconds from 1 to {MAX_LEASE_DURATION:g} "
            f"(got {text!r})"
        )
    return value


def replicas(args: argparse.Namespace) -> int | None:
    """`--replicas` (None: not given); ValueError naming the flag."""
    if args.replicas is None:
        return None
    try:
        value = int(args.replicas)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"--replicas must be a whole number of at least 1 (got {args.replicas!r})")
    return value


def own_addresses(environ: Mapping[str, str] | None = None) -> list[IPAddress]:
    """The pod's addresses (the downward API's POD_IPS/POD_IP, and what its host name
    resolves to): the gateway never connects to itself on a tenant's say-so."""
    environ = os.environ if environ is None else environ
    found = [
        a for v in (environ.get("POD_IPS", ""), environ.get("POD_IP", "")) for a in v.split(",")
    ]
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, proto=socket.IPPROTO_TCP)
    except OSError:
        infos = []  # a host name that does not resolve names no address
    found += [str(info[4][0]) for info in infos]
    out = []
    for text in found:
        try:
            out.append(parse(text.strip()))
        except ValueError:
            continue
    return out


def egress_rules(args: argparse.Namespace) -> EgressRules:
    """`--allow-hosts`, and the pod's own addresses; ValueError naming a bad entry."""
    entries = [e for value in args.allow_hosts for e in value.split(",") if e.strip()]
    ports = [
        int(p)
        for p in (getattr(args, "status_port", None), getattr(args, "health_port", None))
        if p is not None and str(p).isdigit()
    ]
    from ..controlplane.egress import EgressRules

    try:
        return EgressRules.of(entries, own_addresses(), ports)
    except ValueError as exc:
        raise ValueError(f"--allow-hosts {exc}") from None


def controller_options(args: argparse.Namespace) -> ControllerOptions:
    """The controller's settings from `serve`'s flags; ValueError naming a bad flag."""
    _check_sources(args)
    _check_names(args)
    # The controller (and with it the Kubernetes client) is loaded in controller mode only:
    # these flags are parsed for every `serve`.
    from .controller import ControllerOptions

    return ControllerOptions(
        kubeconfig=args.kubeconfig or None,
        identity=os.environ.get("POD_NAME") or socket.gethostname(),
        lease_namespace=_lease_namespace(args.lease_namespace),
        controller_name=args.controller_name,
        cluster_domain=args.cluster_domain,
        lease_name=DEFAULT_LEASE_NAME,
        lease_duration=_lease_duration(args.lease_duration),
        egress=egress_rules(args),
    )


# --- where policies' secrets may come from (controlplane/secret_sources.py) -------------------


def _add_secret_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--secret-files-dir",
        metavar="DIR",
        default=None,
        help="let a policy of namespace NS name files under DIR/NS/ as secrets (file:, "
        "symbolic links resolved first); without it a policy in a cluster reads secrets only "
        "from Secrets (secretRef), never a file or environment variable of the gateway",
    )


def secret_files_dir(args: argparse.Namespace) -> str | None:
    """`--secret-files-dir`, normalised (None: not given); ValueError naming the flag."""
    given: str | None = args.secret_files_dir
    if given is None:
        return None
    if not os.path.isabs(given):
        raise ValueError(f"--secret-files-dir {given!r} must be an absolute path")
    if not os.path.isdir(given):
        raise ValueError(f"--secret-files-dir {given}: no such directory")
    return os.path.normpath(given)
