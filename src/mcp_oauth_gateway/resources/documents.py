"""The YAML documents of one file, each parsed and validated on its own, so that a reload of a
large file parses only the documents whose text changed.

A line starting with `---` and then a space, a tab or the line's end starts a document wherever
it is: YAML forbids it inside any scalar or collection (a block scalar ends before it, a quoted
or flow one is an error), so cutting the text before each such line gives the same documents as
parsing the whole. Where that is not certain the file is parsed whole, as before: directives
(`%YAML`, `%TAG`, whose meaning runs across documents), `...` end markers, line breaks other
than `\\n` (YAML also breaks lines at `\\r`, NEL and the Unicode separators), and any piece that
does not parse alone as at most one document (its error is reported from the whole file, with
the file's own line numbers).
"""

from __future__ import annotations

import hashlib
import itertools

import yaml

# Where a document may start: a line beginning `---`, then a blank or the line's end.
_MARKER = "\n---"
_AFTER_MARKER = ("", " ", "\t", "\n")
# What makes cutting uncertain: directive and end marker lines, other kinds of line breaks.
_UNCERTAIN_LINES = ("\n%", "\n...")
_UNCERTAIN_STARTS = ("%", "...")
_OTHER_BREAKS = ("\r", "\x85", "\u2028", "\u2029")


def split_documents(text: str) -> list[str] | None:
    """The text cut before each line that starts a document, or None when it must be parsed
    whole."""
    if text.startswith(_UNCERTAIN_STARTS) or any(
        mark in text for mark in (*_UNCERTAIN_LINES, *_OTHER_BREAKS)
    ):
        return None
    cuts = [0]
    at = text.find(_MARKER)
    while at != -1:
        if text[at + 4 : at + 5] in _AFTER_MARKER:
            cuts.append(at + 1)
        at = text.find(_MARKER, at + 4)
    cuts.append(len(text))
    return [text[start:end] for start, end in itertools.pairwise(cuts)]


def digest(piece: str) -> bytes:
    """What a piece is known by in the cache (its text itself would double what is held)."""
    return hashlib.sha256(piece.encode("utf-8")).digest()


def parse_piece(piece: str, loader: type[yaml.SafeLoader]) -> list[object] | None:
    """The piece's documents (none, or one), or None when it does not parse alone as that."""
    try:
        documents = list(yaml.load_all(piece, Loader=loader))
    except yaml.YAMLError:
        return None
    return documents if len(documents) <= 1 else None
