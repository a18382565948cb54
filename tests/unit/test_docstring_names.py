"""What the prose of src/ names exists (issue 40): every name a docstring or comment puts in
backquotes (`name`, `module.name`, `name()`, `file.py`) is a module or file of the package,
something it defines (a class, function, parameter, attribute or variable), a value it uses (a
string constant: a JSON key, an error code, a header), a field of its resources, an extra of the
distribution, or a name of a library it imports; a short list holds the words of other systems
the comments quote, and example hosts (RFC 2606) need no checking. Every `--flag` the prose
names is one of the command line's, or one of the few of kubectl's it tells operators to use.
A rename or a removal that leaves the prose behind fails here, naming the file and the name."""

from __future__ import annotations

import argparse
import ast
import builtins
import importlib
import importlib.util
import io
import re
import tokenize
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import BaseModel

import mcp_oauth_gateway
from mcp_oauth_gateway.cli.flags import parser
from support import ROOT

PACKAGE = Path(mcp_oauth_gateway.__file__).resolve().parent
TICKED = re.compile(r"`([^`\s]+)`")
NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?")
FILE = re.compile(r"[\w./-]+\.py")
# RFC 2606's example names, and HTTP header names (ASGI spells them in lower case, as bytes).
EXAMPLE_HOST = re.compile(r"(?:[\w-]+\.)*(?:example\.com|example)")
HEADER = re.compile(r"[A-Z][a-z]+(?:-[A-Z][a-z]+)*")
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]+")
# Flags of other programs the prose tells operators to run.
OTHER_PROGRAMS_FLAGS = {
    # kubectl: server-side validation, reading the issuer discovery, a token's audience.
    "--validate", "--raw", "--audience",
    # kube-apiserver: the service-account token issuer.
    "--service-account-issuer",
}  # fmt: skip

# Words of other systems that comments quote to say what the gateway imitates or talks to; none
# is a name of ours, and none is importable here.
EXTERNAL = {
    # Redis: replies, commands, a server setting, a redis-py keyword.
    "ASK", "MOVED", "WAIT", "maxmemory", "decode_responses",
    # Kubernetes: watch event types and an error object's kind.
    "ADDED", "MODIFIED", "DELETED", "BOOKMARK", "Status",
    # DNS: the record type.
    "A",
    # Keycloak's Java classes and REST representations (what the dev IdP imitates).
    "ErrorRepresentation", "GroupRepresentation", "OIDCClientRepresentation",
    "RealmRepresentation", "UserRepresentation", "Time.currentTime()",
    # authentik's Django serializers, views, signals and fields (what the dev IdP imitates).
    "ApplicationSerializer", "ApplicationViewSet.list", "CertificateKeyPairSerializer",
    "FlowSerializer", "OAuth2ProviderSerializer", "ScopeMappingSerializer", "GrantTypesEnum",
    "post_save", "_expand_applications", "reserved_slugs",
    # Browsers' and the MCP SDKs' names, a W3C Trace Context header, a JWK member, a CEL
    # strings-extension function, a GitHub scope, a Unix command.
    "TextDecoder", "resource_subscriptions", "traceparent", "key_ops", "lowerAscii", "repo",
    "tee",
    # An example of the names federation offers (target `b`, tool `echo`).
    "b_echo",
    # Header spellings after a server's mangling (the attack dataplane/headers.py refuses).
    "HTTP_X_USER", "X_User", "X_Api_Key",
    # What pydantic's to_camel would make of a field, and why the API does not say it.
    "userOauth",
}  # fmt: skip


@dataclass
class Package:
    """What the package's sources hold, read in one pass over each."""

    # Every name it defines, binds or imports, and every string value it uses.
    names: set[str] = field(default_factory=set)
    # The bytes it uses as values: ASGI's header names, in lower case.
    header_names: set[str] = field(default_factory=set)
    # Name → (library module, attribute) of what it imports by name (`from pathlib import Path`).
    imported: dict[str, tuple[str, str]] = field(default_factory=dict)
    # (where, text) of its docstrings and of its comments that quote something.
    prose: list[tuple[str, str]] = field(default_factory=list)
    files: set[str] = field(default_factory=set)


def _names(node: ast.AST) -> Iterator[str]:
    """The names one node defines, binds or imports, or the string value it is."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield node.name
    elif isinstance(node, ast.arg):
        yield node.arg
    elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
        yield node.id
    elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
        yield node.attr
    elif isinstance(node, ast.keyword) and node.arg:
        yield node.arg
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        yield node.value
    elif isinstance(node, ast.Import | ast.ImportFrom):
        for alias in node.names:
            yield from alias.name.split(".")
            yield alias.asname or alias.name
        if isinstance(node, ast.ImportFrom) and node.module:
            yield from node.module.split(".")


def _docstrings(node: ast.AST) -> Iterator[ast.Constant]:
    """A module's, class's or function's docstring, and those under a module's or class's
    fields."""
    if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return
    fields = isinstance(node, ast.Module | ast.ClassDef)
    for index, statement in enumerate(node.body):
        after_field = (
            fields and index > 0 and isinstance(node.body[index - 1], ast.AnnAssign | ast.Assign)
        )
        if (
            (index == 0 or after_field)
            and isinstance(statement, ast.Expr)
            and isinstance(statement.value, ast.Constant)
            and isinstance(statement.value.value, str)
        ):
            yield statement.value


def _comments(text: str) -> Iterator[tuple[int, str]]:
    """(line, comment) of the comments that quote a name or a flag (tokenized line by line: the
    whole file would take seconds)."""
    for number, line in enumerate(text.splitlines(), 1):
        if "#" not in line or not re.search("`|--", line[line.index("#") :]):
            continue
        try:
            for token in tokenize.generate_tokens(io.StringIO(line).readline):
                if token.type == tokenize.COMMENT:
                    yield number, token.string
        except (tokenize.TokenError, SyntaxError):
            continue  # a line of a multi-line string or statement: its comment came first


def _read(found: Package, path: Path) -> None:
    text = path.read_text()
    where = path.relative_to(PACKAGE)
    found.files.add(path.name)
    found.names.update(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    for node in ast.walk(ast.parse(text, str(path))):
        found.names.update(_names(node))
        if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
            found.header_names.add(node.value.decode("latin-1"))
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                found.imported[alias.asname or alias.name] = (node.module, alias.name)
        found.prose += [(f"{where}:{doc.lineno}", doc.value) for doc in _docstrings(node)]
    found.prose += [(f"{where}:{number}", comment) for number, comment in _comments(text)]


def _models() -> Iterator[type[BaseModel]]:
    for path in (PACKAGE / "resources").glob("*.py"):
        module = importlib.import_module(f"mcp_oauth_gateway.resources.{path.stem}")
        for value in vars(module).values():
            if isinstance(value, type) and issubclass(value, BaseModel):
                yield value


@cache
def package() -> Package:
    """The package's sources, the field names of its resources and the distribution's extras."""
    found = Package()
    for path in sorted(PACKAGE.rglob("*.py")):
        _read(found, path)
    for model in _models():
        found.names.update(f.alias for f in model.model_fields.values() if f.alias)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    found.names.update(project["optional-dependencies"])
    return found


def known() -> set[str]:
    return package().names


def _resolves(head: object, parts: list[str]) -> bool:
    """Whether `parts` are attributes (or submodules) of `head`, one after the other; past an
    object that is not a module, an attribute set on instances counts as well."""
    for part in parts:
        if hasattr(head, part):
            head = getattr(head, part)
        elif isinstance(head, ModuleType) and hasattr(head, "__path__"):
            if importlib.util.find_spec(f"{head.__name__}.{part}") is None:
                return False
            head = importlib.import_module(f"{head.__name__}.{part}")
        elif not isinstance(head, ModuleType) and part in known():
            continue
        else:
            return False
    return True


def _top_modules() -> set[str]:
    return {p.stem for p in PACKAGE.glob("*.py")} | {
        p.name for p in PACKAGE.iterdir() if p.is_dir()
    }


def _library(name: str) -> ModuleType | object | None:
    """The builtin, the name imported from a library, or the installed module a name starts
    with."""
    if hasattr(builtins, name):
        return getattr(builtins, name)
    if name in package().imported:
        module, attribute = package().imported[name]
        return getattr(importlib.import_module(module), attribute, None)
    try:
        found = importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return None
    return importlib.import_module(name) if found else None


def exists(name: str) -> bool:
    """Whether a backquoted name is one of the package's, or a library's, or quoted on purpose."""
    if name in EXTERNAL or name in known() or EXAMPLE_HOST.fullmatch(name):
        return True
    if HEADER.fullmatch(name) and name.lower() in package().header_names:
        return True
    if name.endswith(".py"):
        return name in package().files or (PACKAGE / name).is_file() or (ROOT / name).is_file()
    parts = name.removesuffix("()").split(".")
    if parts[0] in _top_modules() and len(parts) > 1:
        return _resolves(importlib.import_module(f"mcp_oauth_gateway.{parts[0]}"), parts[1:])
    if all(part in known() for part in parts):
        return True
    library = _library(parts[0])
    return library is not None and _resolves(library, parts[1:])


@cache
def names_in_prose() -> tuple[tuple[str, str], ...]:
    """(where, name) of every name the package's docstrings and comments put in backquotes, and
    of every dotted name of its modules they write without (`resources.backend.TARGET_NAME`)."""
    dotted = re.compile(rf"(?<![\w.`/-])(?:{'|'.join(_top_modules())})(?:\.[A-Za-z_]\w*)+")
    return tuple(
        (where, name)
        for where, text in package().prose
        for name in [*TICKED.findall(text), *dotted.findall(text)]
        if NAME.fullmatch(name) or FILE.fullmatch(name)
    )


def test_every_name_the_prose_puts_in_backquotes_exists():
    missing = [f"{where}: `{name}`" for where, name in names_in_prose() if not exists(name)]
    assert missing == [], "rename or remove these in the prose:\n" + "\n".join(missing)


def test_the_prose_is_read():
    """The check would pass vacuously over prose it does not see."""
    found = {name for _, name in names_in_prose()}
    # Quoted only in a module docstring, a field's docstring, a comment.
    assert {"ProviderKind", "Allowed", "Application.slug"} <= found


def test_every_word_of_the_short_list_is_still_quoted():
    """A word no comment quotes any more leaves the list."""
    assert EXTERNAL - {name for _, name in names_in_prose()} == set()


def our_flags() -> set[str]:
    """Every flag of `mcp-oauth-gateway` and its commands."""
    found: set[str] = set()
    parsers = [parser()]
    while parsers:
        for action in parsers.pop()._actions:
            found.update(action.option_strings)
            if isinstance(action, argparse._SubParsersAction):
                parsers += action.choices.values()
    return found


def test_every_flag_the_prose_names_is_one_of_the_command_line():
    flags = our_flags() | OTHER_PROGRAMS_FLAGS
    missing = [
        f"{where}: {flag}"
        for where, text in package().prose
        for flag in FLAG.findall(text)
        if flag not in flags
    ]
    assert missing == [], "rename or remove these flags in the prose:\n" + "\n".join(missing)


def test_the_flags_are_read():
    named = {flag for _, text in package().prose for flag in FLAG.findall(text)}
    assert {"--user-token-key", "--trust-forwarded-headers", "--flavour"} <= named
    assert named >= OTHER_PROGRAMS_FLAGS, "a flag no prose names any more leaves the list"
    assert {"--flavour", "--mode", "--user-token-key", "--status-port"} <= our_flags()


@pytest.mark.parametrize(
    "name",
    [
        "serving.runtime",  # a module that was renamed
        "serving.process_state.BrokerRuntime",  # a class that was renamed
        "provider_kinds.parse_kinds",  # a function that never was
        "_embedded",  # a helper that was renamed
        "runtime_of_brokers()",
        "kubernetes_asyncio.leaderelection.nothing",  # a library's name that is not
        "no_such_file.py",
        "serving/no_such_file.py",
    ],
)
def test_a_name_that_is_not_there_is_found(name):
    assert not exists(name)


@pytest.mark.parametrize(
    "name",
    [
        "serving.process_state.ProcessState",
        "provider_kinds.ProviderKind.from_flavour",
        "ProcessState.retain()",
        "authorizationServerMode",  # a resource field
        "invalid_token",  # a value the package uses
        "kubernetes_asyncio.leaderelection",
        "str.split()",
        "controlplane/secret_sources.py",
        "tests/unit/kube/test_leader.py",
    ],
)
def test_a_name_that_is_there_is_found(name):
    assert exists(name)
