"""Where a policy's secrets may come from, in each mode, and reading them.

From resource files (`serve -f`, `check`) the operator wrote every policy: `file` and `env` name
anything of the gateway's, and `secretRef` is refused (no API server to read a Secret from).

In a cluster, tenants in namespaces that do not trust each other write policies, and whatever a
policy names is sent to a backend or token endpoint that policy's author chose. So:
- `secretRef` reads a Secret of the policy's own namespace, or of another namespace whose
  ReferenceGrant lets that namespace's GatewayPolicies refer to it. Without a grant the Secret
  is never read and the message speaks only of the grant (never whether the Secret exists).
- `env` is refused: one process has one environment, which no name rule can split between
  namespaces (and it holds the gateway's own secrets, such as the Broker's Redis URL).
- `file` is refused unless the operator gave `--secret-files-dir DIR`, and then a policy of
  namespace N reads only files under `DIR/N/`, symbolic links resolved first, `..` refused.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from types import MappingProxyType

from ..resources.models import (
    BackendCredentialsSpec,
    GatewayPolicy,
    ReferenceGrant,
    SecretKeyRef,
    SecretSource,
    TargetCredentials,
)
from .cluster import Cluster, Reference
from .cluster_secrets import SECRET_READER_ROLE, ClusterSecrets
from .objects import Entry

MAX_SECRET_BYTES = 16 * 1024
POLICY_GROUP = "mcp-oauth-gateway.dev"


class SecretError(ValueError):
    """A secret cannot be used; the message names where it was looked for (never its value)."""


@dataclass(frozen=True, slots=True)
class SecretScope:
    """What one policy's secrets are read against: its namespace and the mode (None: resource
    files), the ReferenceGrants of the cluster, and (tests) the environment."""

    namespace: str = "default"
    cluster: Cluster | None = None
    grants: Mapping[str, Entry[ReferenceGrant]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    environ: Mapping[str, str] | None = field(default=None, repr=False)


# --- what each source is allowed -------------------------------------------------------------


def secret_reference(ref: SecretKeyRef, namespace: str) -> Reference:
    """The reference a policy of `namespace` makes to a Secret (ReferenceGrant terms)."""
    return Reference(
        POLICY_GROUP, "GatewayPolicy", namespace, "", "Secret", ref.namespace or namespace, ref.name
    )


def source_refusal(source: SecretSource, scope: SecretScope) -> str | None:
    """Why the policy may not read this source in its mode (None: it may); about the field."""
    cluster = scope.cluster
    own = f"a Secret of namespace {scope.namespace}"
    if source.secret_ref is not None:
        if cluster is None:
            return (
                "secretRef names a Kubernetes Secret, which only the controller reads (serve "
                "--kubeconfig or --in-cluster); from resource files use file or env"
            )
        refusal = secret_reference(source.secret_ref, scope.namespace).refusal(scope.grants)
        return None if refusal is None else f"secretRef: {refusal}"
    if cluster is None:
        return None
    if source.env is not None:
        return (
            f"env: in a cluster a policy cannot read the gateway's environment variables (one "
            f"environment for every namespace, with the gateway's own secrets in it); put the "
            f"secret in {own} and use secretRef: {{name, key}}"
        )
    assert source.file is not None  # the model guarantees exactly one source
    return file_refusal(source.file, cluster.secret_files_dir, scope.namespace)


def file_refusal(path: str, files_dir: str | None, namespace: str) -> str | None:
    """Why a policy of `namespace` may not read `path` in a cluster, by its name alone."""
    fix = f"put the secret in a Secret of namespace {namespace} and use secretRef: {{name, key}}"
    why = path_refusal(path, files_dir, namespace, "a policy", fix)
    return None if why is None else f"file: {why}"


def path_refusal(
    path: str, files_dir: str | None, namespace: str, reader: str, fix: str
) -> str | None:
    """Why `reader` (an object of `namespace`) may not read `path` in a cluster, by its name
    alone; `fix` says what to do instead."""
    if files_dir is None:
        return (
            f"in a cluster {reader} reads no file of the gateway's pod (the gateway runs "
            f"without --secret-files-dir); {fix}"
        )
    base = namespace_dir(files_dir, namespace)
    if ".." in PurePosixPath(path).parts:
        return f"{path} contains '..'; name the file under {base}/ directly"
    if not inside(os.path.normpath(path), base):
        return (
            f"{path} is not under {base}/, the only directory --secret-files-dir lets "
            f"{reader} of namespace {namespace} read; {fix}"
        )
    return None


def namespace_dir(files_dir: str, namespace: str) -> str:
    """The directory a policy of `namespace` may read files in."""
    return os.path.join(os.path.normpath(files_dir), namespace)


def inside(path: str, directory: str) -> bool:
    """Whether the (normalised, absolute) `path` is below `directory`, not the directory."""
    return path != directory and path.startswith(directory.rstrip("/") + "/")


# --- reading ---------------------------------------------------------------------------------


def read_secret(source: SecretSource, scope: SecretScope | None = None) -> str:
    """The secret's value, from where the policy may read it in its mode; SecretError saying
    why not (never with the value)."""
    scope = scope or SecretScope()
    refusal = source_refusal(source, scope)
    if refusal is not None:
        raise SecretError(refusal)
    if source.secret_ref is not None:
        assert scope.cluster is not None  # refused above otherwise
        return _from_secret(source.secret_ref, scope.namespace, scope.cluster.secrets)
    if source.env is not None:
        environ = os.environ if scope.environ is None else scope.environ
        if source.env not in environ:
            raise SecretError(
                f"environment variable {source.env} is not set in the gateway's environment"
            )
        return checked_value(environ[source.env].encode(), f"environment variable {source.env}")
    assert source.file is not None  # the model guarantees exactly one source
    if scope.cluster is None:
        return checked_value(_read_file(source.file, source.file), f"file {source.file}")
    return _from_namespace_file(source.file, scope)


def _from_namespace_file(path: str, scope: SecretScope) -> str:
    """A file under the policy's namespace directory, checked again once its links resolve."""
    assert scope.cluster is not None
    assert scope.cluster.secret_files_dir is not None
    try:
        real = _real_path_inside(path, scope.cluster.secret_files_dir, scope.namespace, "a policy")
    except SecretError as exc:
        raise SecretError(f"file: {exc}") from None
    # No link is left to follow in `real`; O_NOFOLLOW refuses one put there since.
    return checked_value(_read_file(real, path, os.O_NOFOLLOW), f"file {path}")


def _real_path_inside(path: str, files_dir: str, namespace: str, reader: str) -> str:
    """`path` with its links resolved, when that is still under `files_dir`/`namespace`/."""
    base = os.path.realpath(namespace_dir(files_dir, namespace))
    real = os.path.realpath(path)
    if not inside(real, base):
        raise SecretError(
            f"{path} leads (through a symbolic link) out of {base}/, the only directory "
            f"{reader} of namespace {namespace} may read"
        )
    return real


def read_namespace_file(
    path: str, namespace: str, cluster: Cluster | None, reader: str, fix: str, limit: int
) -> bytes:
    """The content of a file `reader` (an object of `namespace`) names, at most `limit`
    bytes: any file of the gateway from resource files; in a cluster only one under
    `--secret-files-dir`/<namespace>/ (`fix`: what to do instead). SecretError saying why
    not (never with the content)."""
    if cluster is None:
        raw = _read_file(path, path, limit=limit)
    else:
        files_dir = cluster.secret_files_dir
        refusal = path_refusal(path, files_dir, namespace, reader, fix)
        if refusal is not None:
            raise SecretError(refusal)
        assert files_dir is not None  # refused above otherwise
        real = _real_path_inside(path, files_dir, namespace, reader)
        raw = _read_file(real, path, os.O_NOFOLLOW, limit)
    if len(raw) > limit:
        raise SecretError(f"file {path} is larger than {limit} bytes")
    return raw


def _read_file(path: str, shown: str, flags: int = 0, limit: int = MAX_SECRET_BYTES) -> bytes:
    """At most `limit` + 1 bytes of a regular file (a FIFO or device never blocks or floods
    the load)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | flags)
    except OSError as exc:
        raise SecretError(f"file {shown} cannot be read: {exc.strerror}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SecretError(f"file {shown} is not a regular file")
        return _read_up_to(fd, limit + 1)
    except OSError as exc:
        raise SecretError(f"file {shown} cannot be read: {exc.strerror}") from exc
    finally:
        os.close(fd)


def _read_up_to(fd: int, size: int) -> bytes:
    """Up to `size` bytes of an open regular file (a single read may return fewer)."""
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, left)
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _from_secret(ref: SecretKeyRef, namespace: str, secrets: ClusterSecrets) -> str:
    target = ref.namespace or namespace
    shown = f"Secret {target}/{ref.name}"
    if target in secrets.unreadable:
        raise SecretError(f"secretRef: {secrets.unreadable[target]}")
    if target not in secrets.listed:
        raise SecretError(f"secretRef: {shown} has not been read from the API server yet")
    data = secrets.data.get((target, ref.name))
    if data is None:
        raise SecretError(
            f"secretRef: {shown} not found; create it with the key {ref.key} (kubectl create "
            f"secret generic {ref.name} -n {target} --from-file={ref.key}=PATH)"
        )
    if ref.key not in data:
        keys = ", ".join(sorted(data)) or "none"
        raise SecretError(f"secretRef: {shown} has no key {ref.key} (its keys: {keys})")
    return checked_value(data[ref.key], f"secretRef: {shown} key {ref.key}")


def checked_value(raw: bytes, where: str) -> str:
    """One line of UTF-8 text (one trailing newline dropped), not empty, not too large."""
    if len(raw) > MAX_SECRET_BYTES:
        raise SecretError(f"{where} is larger than {MAX_SECRET_BYTES} bytes")
    try:
        value = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretError(f"{where} is not UTF-8 text") from None
    value = value.removesuffix("\n").removesuffix("\r")
    if not value:
        raise SecretError(f"{where} is empty")
    if any(c in value for c in "\r\n\x00") or not value.isprintable():
        raise SecretError(f"{where} holds control characters; a secret must be one line")
    return value


# --- which Secrets the controller reads ------------------------------------------------------


def credential_sources(spec: BackendCredentialsSpec | TargetCredentials) -> Iterator[SecretSource]:
    """Every secret one credential mode names."""
    if spec.token_exchange is not None:
        yield spec.token_exchange.client_secret
    header = spec.secret_header
    if header is not None:
        yield header.value
        if header.identity is not None and header.identity.signing_key is not None:
            yield header.identity.signing_key


def policy_secret_sources(policy: GatewayPolicy) -> Iterator[SecretSource]:
    """Every secret of a policy's credentials (the default mode and each target's)."""
    backend = policy.spec.backend
    spec = backend.credentials if backend is not None else None
    if spec is None:
        return
    for mode in (spec, *(spec.targets or ())):
        yield from credential_sources(mode)


def reads_outside(policy: GatewayPolicy) -> bool:
    """Whether compiling the policy reads what no object holds: a file, an environment
    variable (each build reads it again)."""
    return any(s.file is not None or s.env is not None for s in policy_secret_sources(policy))


def policy_secret_refs(policy: GatewayPolicy) -> Iterator[SecretKeyRef]:
    """Every `secretRef` of a policy's credentials (the default mode and each target's)."""
    for source in policy_secret_sources(policy):
        if source.secret_ref is not None:
            yield source.secret_ref


def wanted_secrets(
    policies: Iterable[GatewayPolicy], grants: Mapping[str, Entry[ReferenceGrant]]
) -> dict[str, frozenset[str]]:
    """Namespace → the Secrets there some policy may use: its own namespace's, or another's a
    ReferenceGrant permits. The controller reads these and no other."""
    wanted: dict[str, set[str]] = {}
    for policy in policies:
        for ref in policy_secret_refs(policy):
            reference = secret_reference(ref, policy.metadata.namespace)
            if reference.refusal(grants) is None:
                wanted.setdefault(reference.to_namespace, set()).add(ref.name)
    return {namespace: frozenset(names) for namespace, names in wanted.items()}


def unreadable_advice(namespace: str, why: str) -> str:
    """What to do when the controller may not read a namespace's Secrets (a policy's status)."""
    return (
        f"the gateway's controller may not read Secrets in namespace {namespace} ({why}); let it "
        f"with a RoleBinding there to the ClusterRole {SECRET_READER_ROLE} for its "
        f"ServiceAccount (deploy/rbac.yaml; the Helm chart's value secretNamespaces)"
    )
