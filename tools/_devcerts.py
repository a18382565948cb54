"""Certificates for the dev servers: a CA, a serving certificate for 127.0.0.1 and a
`system:masters` client certificate, issued with `cryptography` when a server first starts.

`dev_cluster.py` writes them into a server's directory; only starting a server needs
`cryptography`, so it is imported where it is used.
"""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from _devserver import ToolError

if TYPE_CHECKING:  # imported where used: only starting a server needs cryptography
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec


@dataclass(frozen=True)
class Tls:
    """Where a server's CA, serving certificate and `system:masters` client certificate live."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def write_tls(tls: Tls, ca_title: str) -> None:
    """A CA, a serving certificate for 127.0.0.1 and a `system:masters` client certificate.

    Kept across stop/start so a kubeconfig handed out earlier stays valid. The CA's key is never
    written: nothing can mint further certificates for this server.
    """
    wanted = [tls.ca, tls.server_cert, tls.server_key, tls.client_cert, tls.client_key]
    if all(path.is_file() for path in wanted):
        return
    require_cryptography()
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = issue(name(ca_title), ca_key, None, None)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = issue(
        name("127.0.0.1"),
        server_key,
        (ca, ca_key),
        ExtendedKeyUsageOID.SERVER_AUTH,
        [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")],
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    # O=system:masters: the group the server always authorizes, whatever RBAC says.
    client = issue(
        name("dev-admin", "system:masters"),
        client_key,
        (ca, ca_key),
        ExtendedKeyUsageOID.CLIENT_AUTH,
    )
    for path, item in (
        (tls.ca, ca),
        (tls.server_cert, server),
        (tls.server_key, server_key),
        (tls.client_cert, client),
        (tls.client_key, client_key),
    ):
        write_pem(path, item)


def write_pem(path: Path, item: x509.Certificate | ec.EllipticCurvePrivateKey) -> None:
    path.write_bytes(pem(item))
    path.chmod(0o600 if path.suffix == ".key" else 0o644)


def name(common: str, organization: str | None = None) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def pem(item: x509.Certificate | ec.EllipticCurvePrivateKey) -> bytes:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    if isinstance(item, x509.Certificate):
        return item.public_bytes(serialization.Encoding.PEM)
    return item.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: tuple[x509.Certificate, ec.EllipticCurvePrivateKey] | None,
    usage: x509.ObjectIdentifier | None,
    sans: Sequence[x509.GeneralName] = (),
) -> x509.Certificate:
    """One certificate: self-signed CA when `issuer` is None, else a leaf signed by it.

    Carries the extensions strict verifiers insist on (key identifiers, key usage), so Go,
    OpenSSL and Python >= 3.13's VERIFY_X509_STRICT all accept it.
    """
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes

    now = datetime.datetime.now(datetime.UTC)
    signer_cert, signer_key = issuer if issuer else (None, key)
    is_ca = issuer is None
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(signer_cert.subject if signer_cert else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        # An hour back tolerates clock skew between this machine and a container.
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=is_ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(signer_key.public_key()), False
        )
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=is_ca,
                crl_sign=is_ca,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return builder.sign(signer_key, hashes.SHA256())


def require_cryptography() -> None:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise ToolError(
            "step certificates: the Python package `cryptography` is missing; run this tool "
            "with the project's virtualenv (.venv/bin/python)"
        ) from None
