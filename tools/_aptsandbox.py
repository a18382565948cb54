"""apt-get and apt-cache over a private Debian sid index, and dpkg-deb to unpack what they fetch.

`dev_apiserver.py build` takes the Go sources of the API server, etcd and kustomize from Debian
sid's packages this way, without touching the machine's own apt set-up or dpkg database.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import _devserver as common
from _devserver import ToolError, say

MIRROR = os.environ.get("MCP_OAUTH_GATEWAY_DEBIAN_MIRROR", "http://deb.debian.org/debian")
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")


class AptSandbox:
    """apt-get/apt-cache over a private sid index: the system's apt set-up is never touched.

    Every state, cache, list and configuration directory apt would use is pointed into `base`,
    and the dpkg status is an empty file, so apt neither reads nor writes the machine's own.
    """

    def __init__(self, base: Path) -> None:
        for sub in ("lists/partial", "cache/archives/partial", "sources.list.d", "prefs.d"):
            (base / sub).mkdir(parents=True, exist_ok=True)
        (base / "sources.list").write_text(f"deb [signed-by={KEYRING}] {MIRROR} sid main\n")
        (base / "status").write_text("")
        arch = subprocess.run(
            ["dpkg", "--print-architecture"], capture_output=True, text=True, check=False
        ).stdout.strip()
        self.options = [
            f"Dir::Etc::sourcelist={base / 'sources.list'}",
            f"Dir::Etc::sourceparts={base / 'sources.list.d'}",
            f"Dir::Etc::preferences={base / 'preferences'}",
            f"Dir::Etc::preferencesparts={base / 'prefs.d'}",
            f"Dir::State={base}",
            f"Dir::State::Lists={base / 'lists'}",
            f"Dir::State::Status={base / 'status'}",
            f"Dir::Cache={base / 'cache'}",
            f"APT::Architecture={arch or 'amd64'}",
            f"APT::Architectures={arch or 'amd64'}",
            "Acquire::Languages=none",
            "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false",
        ]
        if os.geteuid() == 0:
            # apt drops to the `_apt` user to download, which cannot enter a home directory
            # such as /root/.cache; downloading as root into our own directory is what we want.
            self.options.append("APT::Sandbox::User=root")

    def command(self, tool: str, *args: str) -> list[str]:
        flags = [part for option in self.options for part in ("-o", option)]
        return [tool, *flags, *args]

    def run(self, tool: str, *args: str, step: str) -> str:
        result = subprocess.run(
            self.command(tool, *args), capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            errors = [line for line in result.stderr.splitlines() if line.startswith("E:")]
            reason = (errors or result.stderr.strip().splitlines() or ["no output"])[0]
            raise ToolError(f"step {step}: {tool} {args[0]} failed: {reason}")
        return result.stdout

    def update(self, step: str) -> None:
        say(f"{step}: apt update of the Debian sid index from {MIRROR} (~11 MB)")
        try:
            self.run("apt-get", "update", "-q", "--error-on=any", step="apt update")
        except ToolError as error:
            raise ToolError(
                f"{error}; check network access to {MIRROR} (deb.debian.org), or set "
                "MCP_OAUTH_GATEWAY_DEBIAN_MIRROR to a reachable Debian mirror"
            ) from None

    def candidate_versions(self, packages: list[str]) -> dict[str, str]:
        out = self.run("apt-cache", "show", "--no-all-versions", *packages, step="resolve")
        versions: dict[str, str] = {}
        name = ""
        for line in out.splitlines():
            if line.startswith("Package: "):
                name = line.split(": ", 1)[1]
            elif line.startswith("Version: ") and name:
                versions[name] = line.split(": ", 1)[1]
        missing = [package for package in packages if package not in versions]
        if missing:
            raise ToolError(f"step resolve: Debian sid has no {', '.join(missing)}")
        return versions

    def go_source_closure(self, package: str) -> list[str]:
        """The Go source packages `package` needs, recursively, from the private index.

        Chosen: `apt-cache depends --recurse` over Depends only. It walks the dependency graph
        without solving an installation, so it needs no dpkg state at all, and it follows virtual
        names (e.g. golang-prometheus-client-dev) to the packages that provide them. Not chosen:
        `apt-get install --download-only` against an empty status, which would also fetch a
        whole base system (libc6, tzdata, protobuf-compiler, ...) that a GOPATH build never
        reads. Only the real `golang-*-dev` packages are kept: they hold /usr/share/gocode.
        """
        say(f"step 2/6: resolving the Go source packages {package} needs")
        out = self.run(
            "apt-cache",
            "depends",
            "--recurse",
            *("--no-recommends", "--no-suggests", "--no-conflicts", "--no-breaks"),
            *("--no-replaces", "--no-enhances"),
            package,
            step="resolve",
        )
        names = {
            line.strip()
            for line in out.splitlines()
            if line
            and not line.startswith((" ", "<"))
            and line.startswith("golang-")
            and line.strip().endswith("-dev")
        }
        if package not in names:
            raise ToolError(f"step resolve: apt-cache depends did not list {package}")
        return sorted(names)

    def download(self, packages: list[str], dest: Path, note: str | None) -> list[Path]:
        """Download into `dest`; `note` is the progress line (None: no progress lines)."""
        dest.mkdir(parents=True, exist_ok=True)
        total = len(packages)
        if note:
            say(note)
        proc = subprocess.Popen(
            self.command("apt-get", "download", "-q", *packages),
            cwd=dest,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        done, last = 0, [""]
        for line in proc.stdout:
            last = [*last[-20:], line.rstrip()]
            if line.startswith("Get:"):
                done += 1
                if note and common.tenth_done(done, total, 10):
                    say(f"  {done}/{total} packages downloaded")
        if proc.wait() != 0:
            errors = [line for line in last if line.startswith(("E:", "Err:"))] or last[-1:]
            raise ToolError(
                f"step download: apt-get download failed: {errors[0]}; check network access "
                f"to {MIRROR}"
            )
        debs = sorted(dest.glob("*.deb"))
        if len(debs) != total:
            raise ToolError(f"step download: expected {total} archives, found {len(debs)}")
        return debs


def extract(debs: list[Path], root: Path, note: str | None) -> None:
    """Unpack `debs` into `root` with dpkg-deb; `note` is the progress line (None: none)."""
    total = len(debs)
    if note:
        say(note)
    root.mkdir(parents=True, exist_ok=True)
    for done, deb in enumerate(debs, 1):
        result = subprocess.run(
            ["dpkg-deb", "-x", str(deb), str(root)], capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise ToolError(f"step extract: dpkg-deb -x {deb.name} failed: {result.stderr.strip()}")
        if note and common.tenth_done(done, total, 5):
            say(f"  {done}/{total} packages extracted")
