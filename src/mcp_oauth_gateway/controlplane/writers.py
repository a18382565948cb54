"""Which resource files a writer has changed and not closed yet: inotify, through watchdog.

Polling sees that a file changed, not whether its writer is done: one that pauses mid-file
(a slow pipe into `tee`, a script writing in steps, an editor saving a large file) leaves a
valid, shorter file for a while. inotify tells: each write is IN_MODIFY and the writer's close
IN_CLOSE_WRITE, so a file modified since its last close is still being written and is not
read. A rename onto a file (IN_MOVED_TO: write-then-rename, `sed -i`, kubelet's `..data` swap)
brings a complete file in one step; a file removed has nothing left to wait for.

Nothing tells a writer that closes the file between two parts of it (`echo … > f; echo … >>
f`), and inotify is not everywhere (other systems, network filesystems, no watches left): then
only the settling time and the reload rules (`protection.py`) hold. Events may also be lost
when the kernel's queue overflows: what was pending is forgotten rather than waited for
forever."""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler, FileSystemMovedEvent
from watchdog.observers.api import BaseObserver
from watchdog.utils import UnsupportedLibcError

from ..resources.loader import YAML_SUFFIXES, expand_paths

log = logging.getLogger("mcp_oauth_gateway.reload")


def _real(path: bytes | str | Path) -> str:
    return os.path.realpath(os.fsdecode(path))


def watched_directories(paths: Sequence[str | Path]) -> dict[str, bool]:
    """Directory → watched recursively: each directory given (its tree), each file's directory,
    and the real directory of each file a symlink leads out of those."""
    out: dict[str, bool] = {}
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            out[_real(path)] = True
        else:
            out.setdefault(_real(path.parent), False)
    trees = [d for d, recursive in out.items() if recursive]
    files, _ = expand_paths(paths)
    for file in files:
        parent = os.path.dirname(_real(file))
        if not any(parent == tree or parent.startswith(tree + os.sep) for tree in trees):
            out.setdefault(parent, False)
    return out


def _end(observer: BaseObserver) -> None:
    observer.stop()
    observer.join(5)


class OpenWrites(FileSystemEventHandler):
    """The files modified since their writer last closed them (by real path)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[str] = set()
        self._observer: BaseObserver | None = None
        self._stopped = False
        # Called (from the observer's thread) when a file may have become complete.
        self.on_done: Callable[[], None] | None = None

    @property
    def active(self) -> bool:
        """Whether inotify reports writes (else nothing is known of open writers)."""
        return self._observer is not None

    def start(self, paths: Sequence[str | Path]) -> str | None:
        """Watch the directories of `paths`; None once watching, else why not."""
        if not sys.platform.startswith("linux"):
            return f"inotify is Linux's, not {sys.platform}'s"
        try:
            from watchdog.observers.inotify import InotifyObserver
        except (ImportError, OSError, UnsupportedLibcError) as exc:  # a libc without inotify
            return f"inotify is not available ({exc})"
        observer = InotifyObserver()
        try:
            for directory, recursive in watched_directories(paths).items():
                observer.schedule(self, directory, recursive=recursive)
            observer.start()
        except OSError as exc:  # no watches or instances left (fs.inotify.max_user_*), …
            return f"cannot watch the files with inotify ({exc})"
        with self._lock:
            # Stopped while starting (a start runs in a thread): this observer is not kept.
            stopped = self._stopped
            if not stopped:
                self._observer = observer
        if stopped:
            _end(observer)
        return None

    def stop(self) -> None:
        """Stop watching (blocks until the observer's thread ends)."""
        with self._lock:
            self._stopped = True
            observer, self._observer = self._observer, None
        if observer is not None:
            _end(observer)

    def busy(self, files: Iterable[str]) -> tuple[str, ...]:
        """The `files` a writer has modified and not closed yet."""
        with self._lock:
            if not self._open:
                return ()
            pending = set(self._open)
        return tuple(f for f in files if _real(f) in pending)

    # --- watchdog's callbacks (its observer thread) -------------------------------------------

    def on_any_event(self, event: FileSystemEvent) -> None:
        """The kernel's queue overflowed: forget what was pending (a close may be lost)."""
        if event.event_type == "events_lost":
            log.warning("file events were lost (inotify queue overflow): %s", event.src_path)
            with self._lock:
                self._open.clear()

    def on_modified(self, event: FileSystemEvent) -> None:
        """A write (or a truncation): the file is being written until it is closed."""
        name = os.fsdecode(event.src_path)
        if not event.is_directory and name.lower().endswith(YAML_SUFFIXES):
            with self._lock:
                self._open.add(_real(name))

    def on_closed(self, event: FileSystemEvent) -> None:
        """The writer closed it: complete, as far as it is concerned."""
        self._done(event.src_path)

    def on_created(self, event: FileSystemEvent) -> None:
        """Created empty, or moved in from an unwatched directory (complete)."""
        self._done(event.src_path)

    def on_deleted(self, event: FileSystemEvent) -> None:
        """Gone: nothing to wait for."""
        self._done(event.src_path)

    def on_moved(self, event: FileSystemEvent) -> None:
        """Renamed: the target holds a complete file in one step."""
        assert isinstance(event, FileSystemMovedEvent)
        self._done(event.src_path, event.dest_path)

    def _done(self, *paths: bytes | str) -> None:
        with self._lock:
            for path in paths:
                if path:
                    self._open.discard(_real(path))
        if self.on_done is not None:
            self.on_done()
