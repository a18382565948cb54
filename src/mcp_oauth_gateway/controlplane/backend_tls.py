"""TLS to a GatewayBackend target, decided at load: the CAs it trusts, the name its certificate
must hold, and the client context the proxy connects with.

Verification is never optional: a context always requires a certificate chaining to the
trusted CAs and holding the server name. `caFile` is read the way a policy's `file` secrets are
(controlplane/secret_sources.py): any file from resource files, in a cluster only under
`--secret-files-dir`/<namespace>/. Its certificates are parsed with `cryptography` and kept in
canonical PEM, so a file that holds none refuses the backend at load instead of failing every
handshake later, and two files with the same certificates are the same trust.
"""

from __future__ import annotations

import functools
import ssl

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from ..resources.models import BackendTls
from .cluster import Cluster
from .secret_sources import SecretError, read_namespace_file
from .snapshot import TargetTls

# A system CA bundle is about 220 KB; a bundle a tenant names stays well below this.
MAX_CA_BYTES = 1 << 20
# Contexts are kept by the certificates they trust: reloads reuse them (loading the system's
# CAs costs milliseconds) and the proxy's pooled connections stay valid.
CONTEXTS_KEPT = 64


class TlsConfigError(ValueError):
    """A target's TLS settings cannot be used; the message says why and how to fix it."""


def compile_tls(tls: BackendTls, host: str, namespace: str, cluster: Cluster | None) -> TargetTls:
    """A target's TLS, resolved: the server name (default `host`), its CAs and its context."""
    ca_pem = None if tls.ca_file is None else ca_bundle(tls.ca_file, namespace, cluster)
    return TargetTls(tls.server_name or host, ca_pem, client_context(ca_pem))


def ca_bundle(path: str, namespace: str, cluster: Cluster | None) -> bytes:
    """The certificates of a CA file, in canonical PEM; TlsConfigError saying why not."""
    fix = (
        "leave caFile out to trust the system's CAs, or have the operator run the gateway with "
        f"--secret-files-dir DIR and put the file under DIR/{namespace}/"
    )
    try:
        raw = read_namespace_file(path, namespace, cluster, "a GatewayBackend", fix, MAX_CA_BYTES)
    except SecretError as exc:
        raise TlsConfigError(str(exc)) from None
    try:
        certificates = x509.load_pem_x509_certificates(raw)
    except ValueError:
        raise TlsConfigError(
            f"file {path} holds no readable PEM certificate; give the CA certificates to trust, "
            "each as -----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----"
        ) from None
    return b"".join(certificate.public_bytes(Encoding.PEM) for certificate in certificates)


@functools.lru_cache(maxsize=CONTEXTS_KEPT)
def client_context(ca_pem: bytes | None) -> ssl.SSLContext:
    """A client context that verifies the server's certificate and name, TLS 1.2 or later,
    HTTP/1.1 by ALPN; trusting `ca_pem` (None: the system's CAs)."""
    context = ssl.create_default_context(cadata=None if ca_pem is None else ca_pem.decode("ascii"))
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # The pool speaks HTTP/1.1 only; saying so keeps a server from choosing h2.
    context.set_alpn_protocols(["http/1.1"])
    # The defaults already; written out because nothing may ever turn them off.
    context.verify_mode = ssl.CERT_REQUIRED
    context.check_hostname = True
    return context
