"""The challenges of a `WWW-Authenticate` header (RFC 9110 §11.6.1), read with werkzeug.

A header may hold several challenges (`Basic realm="x", Bearer resource_metadata="…"`), and
several header fields are one comma-separated list. werkzeug splits the list at the commas that
are outside quoted strings and reads each `name=value` item (quotes and escapes included); what
is left here is only which item starts a new challenge: the one whose text before any `=` holds
a space, `scheme param=…`, or a lone scheme with no `=` at all."""

from __future__ import annotations

from dataclasses import dataclass

from werkzeug.http import parse_dict_header, parse_list_header


@dataclass(frozen=True, slots=True)
class Challenge:
    """One challenge: its scheme (lower case) and parameters in order (names lower case, as
    RFC 9110 §11.2 compares them case-insensitively; None for a name without a value)."""

    scheme: str
    params: tuple[tuple[str, str | None], ...] = ()

    def values(self, name: str) -> list[str]:
        """Every value this challenge gives `name` (a well-formed one gives at most one)."""
        return [value for key, value in self.params if key == name and value is not None]


def _starts_challenge(item: str) -> bool:
    head, has_value, _ = item.partition("=")
    return not has_value or any(space in head.strip() for space in " \t")


def _params(text: str) -> list[tuple[str, str | None]]:
    return [(key.lower(), value) for key, value in parse_dict_header(text).items()]


def challenges(header: str | None) -> list[Challenge]:
    """The challenges of a header value (several fields joined by `, `); none when it is
    absent or cannot be read (an unclosed quoted string)."""
    if not header:
        return []
    found: list[tuple[str, list[tuple[str, str | None]]]] = []
    for item in parse_list_header(header):
        if _starts_challenge(item):
            scheme, _, rest = item.strip().partition(" ")
            rest = rest.strip(" \t")
            # `scheme token68` (Negotiate, Basic credentials) has no parameters to read.
            found.append((scheme.lower(), _params(rest) if "=" in rest.rstrip("=") else []))
        elif found:
            found[-1][1].extend(_params(item))
        # Parameters before any scheme belong to no challenge: the header is malformed there.
    return [Challenge(scheme, tuple(params)) for scheme, params in found]


def parameter(header: str | None, name: str) -> list[str]:
    """The distinct values `name` has in any challenge of `header`, in order."""
    seen: list[str] = []
    for challenge in challenges(header):
        for value in challenge.values(name):
            if value not in seen:
                seen.append(value)
    return seen


def bearer_parameter(header: str | None, name: str) -> list[str]:
    """The distinct values `name` has in the header's Bearer challenges, in order."""
    seen: list[str] = []
    for challenge in challenges(header):
        if challenge.scheme == "bearer":
            seen += [value for value in challenge.values(name) if value not in seen]
    return seen
