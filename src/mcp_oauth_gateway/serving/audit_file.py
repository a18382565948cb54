"""The audit log's file (`serve --audit-log PATH`): opened for appending with the mode rules the
gateway starts with, and checked to still be the file at its path. A file removed or replaced
while open is written on unseen: its lines reach no one reading the path (a log shipper,
`tail -F`), so the writer asks `gone()` before each batch and opens the path anew."""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import sys

log = logging.getLogger("mcp_oauth_gateway.audit")

STDOUT = "-"
FILE_MODE = 0o640
_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)
Where = tuple[int, int]


def open_audit_file(path: str) -> int:
    """An append-only descriptor of the audit file (created when missing); OSError if not."""
    if path == STDOUT:
        return os.dup(sys.stdout.fileno())
    return os.open(path, _OPEN_FLAGS, FILE_MODE)


def check_path(path: str) -> None:
    """Raise OSError unless `path` can be opened for appending (checked before serving)."""
    os.close(open_audit_file(path))


def exposure(path: str) -> tuple[bool, str] | None:
    """Who else may touch the audit file at `path` (a regular file): (refused, why) when every
    user of the machine may write it (anyone could add lines: it would prove nothing) or read
    it (who called what, and why); None when only its owner and group may, or it is no
    regular file (standard output, a pipe, a device)."""
    if path == STDOUT:
        return None
    try:
        found = os.stat(path)
    except OSError:
        return None
    return _exposure(found)


def _exposure(found: os.stat_result) -> tuple[bool, str] | None:
    if not stat.S_ISREG(found.st_mode):
        return None
    if found.st_mode & stat.S_IWOTH:
        return True, "every user of this machine can write lines into it"
    if found.st_mode & stat.S_IROTH:
        return False, "every user of this machine can read it"
    return None


class AuditFile:
    """The open descriptor of the audit log, and the file it writes to."""

    def __init__(self, path: str):
        self.path = path
        self.fd: int | None = None
        # Opened before: a warning at start is the command line's (`exposure`), later ones ours.
        self._opened = False

    def open(self) -> str | None:
        """Open the path anew (the old descriptor closed); why it cannot be written, or None.
        A file every user may write is not written (made by someone else in between: lines
        there prove nothing), as at start; one every user may read is named in a warning."""
        old, self.fd = self.fd, None
        if old is not None:
            with contextlib.suppress(OSError):
                os.close(old)
        try:
            fd = open_audit_file(self.path)
        except OSError as exc:
            return f"cannot be opened: {exc}"
        exposed = _exposure(os.fstat(fd)) if self.path != STDOUT else None
        if exposed is not None and exposed[0]:
            os.close(fd)
            return "is writable by every user of this machine (chmod o-w it)"
        if exposed is not None and self._opened:
            log.warning("audit log %s: %s; chmod o-r %s", self.path, exposed[1], self.path)
        self.fd, self._opened = fd, True
        return None

    def where(self) -> Where | None:
        """The file the descriptor writes to (device, inode), or None."""
        try:
            found = os.fstat(self.fd) if self.fd is not None else None
        except OSError:
            return None
        return None if found is None else (found.st_dev, found.st_ino)

    def gone(self) -> str | None:
        """What became of the open file at its path, in words: removed, replaced by another,
        or out of sight; None while the path still names it (and for standard output)."""
        if self.path == STDOUT or self.fd is None:
            return None
        try:
            found = os.stat(self.path)
        except FileNotFoundError:
            return "was removed"
        except OSError as exc:
            return f"cannot be looked up at its path ({exc.strerror})"
        if (found.st_dev, found.st_ino) != self.where():
            return "was replaced by another file"
        return None

    def write(self, data: memoryview) -> int:
        """One write of `data`; how many bytes it placed (OSError when it failed)."""
        assert self.fd is not None
        return os.write(self.fd, data)

    def close(self) -> None:
        """Close the descriptor (if open)."""
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None
