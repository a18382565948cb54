"""What the generators of committed files share (gen_crds, gen_reference): compare what they
render with what is committed, then write the differences or, with --check, name them."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def stale_files(rendered: Mapping[Path, str]) -> list[Path]:
    """The files whose committed text differs from the rendered one."""
    return [
        path
        for path, text in rendered.items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]


def run(
    argv: list[str] | None,
    description: str | None,
    render: Callable[[], Mapping[Path, str]],
    regenerate: str,
) -> int:
    """Write the stale files, or with --check report them (exit 1) for `regenerate` to fix."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="only report files out of date")
    args = parser.parse_args(argv)
    rendered = render()
    stale = stale_files(rendered)
    if args.check:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is out of date: run {regenerate}", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(rendered[path], encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0
