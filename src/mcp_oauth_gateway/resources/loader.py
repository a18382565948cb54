"""Load resources from YAML files and directories; errors name file, resource and field."""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from .documents import digest, parse_piece, split_documents
from .models import KINDS, Resource

YAML_SUFFIXES = (".yaml", ".yml", ".json")
# libyaml's parser when PyYAML was built with it (ten times faster), else the pure-Python one;
# both build the documents with the same safe constructor.
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True, slots=True)
class Source:
    """Where a resource came from: the file and the document's position in it."""

    path: str
    document: int

    def __str__(self) -> str:
        return self.path if self.document == 0 else f"{self.path} (document {self.document + 1})"


@dataclass(frozen=True, slots=True)
class Loaded:
    resource: Resource
    source: Source
    # (kind, `namespace/name`): no two resources loaded together may share it (made once).
    identity: tuple[str, str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        identity = (self.resource.kind, self.resource.metadata.key)
        object.__setattr__(self, "identity", identity)

    @property
    def label(self) -> str:
        """`Kind namespace/name`, used at the start of every message about this resource."""
        return f"{self.resource.kind} {self.resource.metadata.key}"


@dataclass(slots=True)
class LoadResult:
    resources: list[Loaded] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    files: list[Path] = field(default_factory=list)

    def of_kind(self, kind: str) -> list[Loaded]:
        """The loaded resources of one kind, in load order."""
        return [item for item in self.resources if item.resource.kind == kind]


def field_path(loc: Iterable[int | str]) -> str:
    """Render a pydantic error location as `spec.rules[0].filters[1].cors`."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("function-after", "function-before", "function-wrap")):
            continue
        else:
            out += f".{part}" if out else part
    return out


def _message(error: ErrorDetails) -> str:
    kind = error["type"]
    msg = str(error["msg"])
    if kind == "extra_forbidden":
        return "unknown field; remove it or check its spelling"
    if kind == "missing":
        return "required field is missing"
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            return msg[len(prefix) :]
    return msg


def validation_problems(exc: ValidationError) -> list[str]:
    """One line per problem: `field.path: what is wrong`."""
    lines = []
    for error in exc.errors():
        path = field_path(error["loc"])
        lines.append(f"{path}: {_message(error)}" if path else _message(error))
    return lines


def describe_validation_error(label: str, source: Source, exc: ValidationError) -> list[str]:
    """One line per problem: `file: Kind ns/name: field.path: what is wrong`."""
    return [f"{source}: {label}: {problem}" for problem in validation_problems(exc)]


# kubelet's atomic writer keeps a ConfigMap or Secret volume's own entries under names starting
# with `..` (`..data`, `..data_tmp`, the timestamped directories); no key may start so.
KUBELET_RESERVED = ".."


def directory_files(root: Path) -> tuple[list[Path], list[str]]:
    """The YAML files under `root`, symlinked files and directories followed (each directory
    once), entries starting with `..` skipped: in a ConfigMap volume each file is read through
    its `name -> ..data/name` link, so from the data directory `..data` points at now."""
    found: list[Path] = []
    errors: list[str] = []
    seen: set[str] = set()
    todo = [root]
    while todo:
        directory = todo.pop()
        real = os.path.realpath(directory)
        if real in seen:
            continue
        seen.add(real)
        try:
            with os.scandir(directory) as listing:
                entries = list(listing)
        except OSError as exc:
            errors.append(f"{directory}: cannot read the directory: {exc.strerror or exc}")
            continue
        for entry in entries:
            if entry.name.startswith(KUBELET_RESERVED):
                continue
            if _is(entry.is_dir):
                todo.append(directory / entry.name)
            elif _is(entry.is_file) and os.path.splitext(entry.name)[1].lower() in YAML_SUFFIXES:
                found.append(directory / entry.name)
    # Path order (by parts), with the parts as the key: comparing Paths costs ten times more.
    found.sort(key=lambda path: path.parts)
    return found, errors


def _is(test: Callable[[], bool]) -> bool:
    """An entry's type test as `Path.is_dir`/`Path.is_file` answer it: False for a link that leads
    nowhere (or in a loop), any other error raised."""
    try:
        return test()
    except OSError as exc:
        if exc.errno in (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP):
            return False
        raise


def expand_paths(paths: Sequence[str | Path]) -> tuple[list[Path], list[str]]:
    """Turn files and directories into the sorted list of YAML files they hold."""
    files: list[Path] = []
    errors: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found, problems = directory_files(path)
            errors += problems
            if not found and not problems:
                errors.append(f"{path}: directory holds no .yaml, .yml or .json files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            errors.append(f"{path}: no such file or directory (pass a YAML file or a directory)")
    return files, errors


def _documents(text: str) -> list[tuple[int, object]]:
    return list(enumerate(yaml.load_all(text, Loader=SAFE_LOADER)))


def _validated(doc: object, source: Source) -> Resource | list[str]:
    """One document as its resource model, or its problems (each naming `source`)."""
    if not isinstance(doc, dict):
        return [f"{source}: expected a mapping with apiVersion and kind, got {type(doc).__name__}"]
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    given = doc.get("metadata")
    metadata: dict[str, object] = given if isinstance(given, dict) else {}
    name = f"{metadata.get('namespace', 'default')}/{metadata.get('name', '<unnamed>')}"
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return [f"{source}: {name}: apiVersion and kind are required strings"]
    model = KINDS.get((api_version, kind))
    if model is None:
        known = ", ".join(f"{k} ({v})" for v, k in KINDS)
        return [
            f"{source}: {kind} {name}: unsupported apiVersion/kind {api_version}/{kind}; "
            f"supported: {known}"
        ]
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        return describe_validation_error(f"{kind} {name}", source, exc)


def _parse_document(doc: object, source: Source) -> Loaded | list[str]:
    """One document as a loaded resource, or its problems."""
    resource = _validated(doc, source)
    return resource if isinstance(resource, list) else Loaded(resource, source)


# What one file reads as: each document's resource or problems, or the file's own problem.
FileResult = tuple[Loaded | list[str], ...] | str


def read_file(path: Path, content: bytes) -> FileResult:
    """Parse and validate one file's documents (a pure function of its path and content)."""
    try:
        documents = _documents(content.decode("utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        return f"{where}: invalid YAML: {problem}"
    except UnicodeDecodeError as exc:
        return f"{path}: cannot read: {exc}"
    parsed = (
        _parse_document(doc, Source(str(path), index))
        for index, doc in documents
        if doc is not None  # an empty document between `---` separators
    )
    return tuple(item for item in parsed if item is not None)


# A piece of a file by the SHA-256 of its text: the index of its first document, and its
# documents as read (None: an empty document), when they all validated.
PieceMap = dict[bytes, tuple[int, tuple[Loaded | None, ...]]]


def read_pieces(path: Path, pieces: list[str], known: PieceMap) -> CachedFile | None:
    """Each piece's documents, those whose text is among the `known` pieces (the file's last
    read) taken from there; None when a piece does not parse alone."""
    found: list[Loaded | list[str]] = []
    kept: PieceMap = {}
    index = 0
    for piece in pieces:
        key = digest(piece)
        first, documents = known.get(key, (index, None))
        if documents is None:
            parsed = parse_piece(piece, SAFE_LOADER)
            if parsed is None:
                return None
            checked = [
                None if doc is None else _parse_document(doc, Source(str(path), index + i))
                for i, doc in enumerate(parsed)
            ]
            if any(isinstance(item, list) for item in checked):
                found.extend(item for item in checked if item is not None)
                index += len(checked)
                continue  # its problems name where it is: read again next time
            documents = tuple(item for item in checked if not isinstance(item, list))
        elif first != index:  # moved within the file: the same resources, named by the place
            documents = tuple(
                None if d is None else Loaded(d.resource, Source(str(path), index + i))
                for i, d in enumerate(documents)
            )
        kept[key] = (index, documents)
        found.extend(item for item in documents if item is not None)
        index += len(documents)
    return CachedFile(b"", tuple(found), kept)


def read_changed(path: Path, content: bytes, known: PieceMap) -> CachedFile:
    """Read a file whose content changed: each of its documents parsed and validated on its own,
    unless its text is among the pieces of the file's last read."""
    try:
        pieces = split_documents(content.decode("utf-8"))
    except UnicodeDecodeError:
        pieces = None
    read = None if pieces is None else read_pieces(path, pieces, known)
    if read is None:
        # Read whole: its errors with the file's own line numbers.
        return CachedFile(content, read_file(path, content), {})
    return replace(read, content=content)


@dataclass(frozen=True, slots=True)
class CachedFile:
    """A file as last read: its bytes, what they read as, its documents by their text, and its
    status when read (None: changed too recently for its status to tell a later change)."""

    content: bytes
    result: FileResult
    pieces: PieceMap
    status: FileStatus | None = None


# A file's device, inode, size, modification and change times (ns): any write, rename onto it
# or change of its times changes its change time, which nothing can set back.
FileStatus = tuple[int, int, int, int, int]
# How long after its last change a file's status is trusted to tell the next one: a write
# within the same tick of a coarse file-system clock (2 s on some) could leave it the same.
SETTLED_NS = 3_000_000_000


def status_of(stat: os.stat_result) -> FileStatus:
    """The parts of a file's status that any change to it changes."""
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def settled(status: FileStatus, now_ns: int, margin_ns: int) -> bool:
    """Whether a file last changed long enough ago (and has times at all) for its status to
    tell whether it changed since."""
    changed = max(status[3], status[4])
    return changed > 0 and now_ns - changed > margin_ns


class FileCache:
    """Each file's result by its exact content, kept from one load to the next: a reload parses
    and validates only the files whose bytes changed, and of those only the documents whose
    text changed. It holds the files of the last load only."""

    def __init__(self, settled_after_ns: int = SETTLED_NS) -> None:
        self._files: dict[Path, CachedFile] = {}
        self.settled_after_ns = settled_after_ns

    def unchanged(
        self, path: Path, status: FileStatus, keep: dict[Path, CachedFile]
    ) -> FileResult | None:
        """The file's result when its status is the one it had when read, long after its last
        change (then it was not written since: it is not even read); else None."""
        known = self._files.get(path)
        if known is None or known.status is None or known.status != status:
            return None
        keep[path] = known
        return known.result

    def read(
        self,
        path: Path,
        content: bytes,
        keep: dict[Path, CachedFile],
        status: FileStatus | None = None,
    ) -> FileResult:
        """The file's result, from the cache when its bytes (or some of its documents) are the
        same as last time; `status`: the file's, taken before it was read."""
        known = self._files.get(path)
        if known is None or known.content != content:
            known = read_changed(path, content, known.pieces if known is not None else {})
        margin = self.settled_after_ns
        trusted = status if status and settled(status, time.time_ns(), margin) else None
        if known.status != trusted:
            known = replace(known, status=trusted)
        keep[path] = known
        return known.result

    def __len__(self) -> int:
        return len(self._files)

    def replace(self, kept: dict[Path, CachedFile]) -> None:
        """Keep only the files of the load that just ended."""
        self._files = kept


def read_content(path: Path) -> bytes:
    """A file's bytes (unbuffered: one file read whole needs no buffer of its own)."""
    with open(path, "rb", buffering=0) as handle:
        return handle.readall()


def _read(path: Path, cache: FileCache | None, kept: dict[Path, CachedFile]) -> FileResult:
    """One file's result: through `cache`, not read at all when its status says it did not
    change (taken before reading: a write after it shows next time)."""
    if cache is None:
        return read_file(path, read_content(path))
    status = status_of(os.stat(path))
    known = cache.unchanged(path, status, kept)
    if known is not None:
        return known
    return cache.read(path, read_content(path), kept, status)


def load_paths(paths: Sequence[str | Path], cache: FileCache | None = None) -> LoadResult:
    """Load every resource under `paths`; problems are collected, never raised. With `cache`,
    files whose content did not change since its last load are not parsed again."""
    files, errors = expand_paths(paths)
    result = LoadResult(errors=errors, files=files)
    seen: dict[tuple[str, str], Source] = {}
    kept: dict[Path, CachedFile] = {}
    for path in files:
        try:
            read = _read(path, cache, kept)
        except OSError as exc:
            result.errors.append(f"{path}: cannot read: {exc}")
            continue
        if isinstance(read, str):
            result.errors.append(read)
            continue
        for parsed in read:
            if isinstance(parsed, list):
                result.errors.extend(parsed)
                continue
            identity = parsed.identity
            if identity in seen:
                result.errors.append(
                    f"{parsed.source}: {parsed.label}: defined twice (first in {seen[identity]})"
                )
                continue
            seen[identity] = parsed.source
            result.resources.append(parsed)
    if cache is not None:
        cache.replace(kept)
    return result
