"""The key file and the sealing: the first key seals and every key opens (rotation); a record
changed, cut, or opened with other associated data (another user's row) does not open; a key
the file no longer holds is named by id, never shown. Every kind of bad key file is refused
with one line naming the file, the line and the fix."""

from __future__ import annotations

import base64
import os
import re
import secrets
from pathlib import Path

import pytest

from mcp_oauth_gateway.usertokens.keys import (
    KEY_BYTES,
    KeyFileError,
    Tampered,
    TokenKeys,
    UnknownKey,
    key_id,
    load_keys,
    new_key_line,
    parse_keys,
    sealed_key_id,
)

AAD = b'grant\x00["https://idp","alice","github"]'


def key_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "keys"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_new_key_line_is_a_key_of_32_random_bytes():
    lines = {new_key_line() for _ in range(20)}
    assert len(lines) == 20
    for line in lines:
        assert len(base64.b64decode(line, validate=True)) == KEY_BYTES
        assert parse_keys(line, "k").key_ids == (key_id(base64.b64decode(line)),)


def test_a_sealed_record_opens_with_its_associated_data_only():
    keys = parse_keys(new_key_line(), "k")
    sealed = keys.seal(b"access-token-value", AAD)
    assert keys.open(sealed, AAD) == b"access-token-value"
    assert b"access-token-value" not in sealed
    assert keys.seal(b"access-token-value", AAD) != sealed, "a fresh nonce every time"
    with pytest.raises(Tampered):
        keys.open(sealed, b'grant\x00["https://idp","bob","github"]')
    with pytest.raises(Tampered):
        keys.open(sealed, b"")


@pytest.mark.parametrize("where", [0, 1, 5, 9, 15, 21, -1])
def test_a_changed_byte_anywhere_is_refused(where):
    keys = parse_keys(new_key_line(), "k")
    sealed = bytearray(keys.seal(b"access-token-value", AAD))
    sealed[where] ^= 0x01
    # The key id (bytes 1-8) changed names no key; any other byte breaks the tag.
    with pytest.raises(UnknownKey if 1 <= where <= 8 else Tampered):
        keys.open(bytes(sealed), AAD)


@pytest.mark.parametrize("length", [0, 1, 9, 21, 36])
def test_a_cut_record_is_refused(length):
    keys = parse_keys(new_key_line(), "k")
    sealed = keys.seal(b"access-token-value", AAD)
    with pytest.raises(Tampered):
        keys.open(sealed[:length], AAD)


def test_the_first_key_seals_and_every_key_opens():
    old, new = new_key_line(), new_key_line()
    before = parse_keys(old, "k")
    rotated = parse_keys(f"{new}\n{old}\n", "k")
    sealed_before = before.seal(b"t1", AAD)
    sealed_after = rotated.seal(b"t2", AAD)
    assert sealed_key_id(sealed_after) == rotated.sealing_id == rotated.key_ids[0]
    assert sealed_key_id(sealed_before) == before.sealing_id == rotated.key_ids[1]
    assert rotated.open(sealed_before, AAD) == b"t1"
    assert rotated.open(sealed_after, AAD) == b"t2"
    with pytest.raises(UnknownKey) as raised:
        before.open(sealed_after, AAD)
    assert raised.value.key_id == rotated.sealing_id
    assert new not in str(raised.value)


def test_the_key_id_and_repr_never_show_the_key():
    line = new_key_line()
    raw = base64.b64decode(line)
    keys = parse_keys(line, "k")
    (kid,) = keys.key_ids
    assert len(kid) == 16
    assert kid not in raw.hex()
    assert raw.hex()[:16] != kid
    assert line not in repr(keys)
    assert raw.hex() not in repr(keys)
    assert kid in repr(keys)


def test_comments_blank_lines_and_spaces_are_allowed():
    one, two = new_key_line(), new_key_line()
    text = f"\ufeff# rotated 2025-06\n\n  {one}  # the new key\r\n\t{two}\n# the end\n"
    assert parse_keys(text, "k").key_ids == (
        key_id(base64.b64decode(one)),
        key_id(base64.b64decode(two)),
    )


BAD_LINES = {
    "not base64": ("not-a-key!", r"k:2: not base64"),
    "url-safe alphabet": (
        base64.urlsafe_b64encode(b"\xfb\xff" * 16).decode(),
        r"k:2: not base64",
    ),
    "missing padding": (new_key_line().rstrip("="), r"k:2: not base64"),
    "two keys on one line": (f"{new_key_line()} {new_key_line()}", r"k:2: not base64"),
    "31 bytes": (base64.b64encode(secrets.token_bytes(31)).decode(), r"k:2: a key of 31 bytes"),
    "33 bytes": (base64.b64encode(secrets.token_bytes(33)).decode(), r"k:2: a key of 33 bytes"),
    "16 bytes": (base64.b64encode(secrets.token_bytes(16)).decode(), r"k:2: a key of 16 bytes"),
    "a placeholder": (base64.b64encode(bytes(32)).decode(), r"k:2: not random bytes"),
    "non-ASCII": ("clé" * 15, r"k:2: not base64"),
}


@pytest.mark.parametrize("case", BAD_LINES)
def test_a_bad_line_is_named_with_the_fix(case):
    line, expected = BAD_LINES[case]
    with pytest.raises(KeyFileError) as raised:
        parse_keys(f"{new_key_line()}\n{line}\n", "k")
    message = str(raised.value)
    assert re.match(expected, message), message
    assert "\n" not in message
    assert "grants new-key" in message


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "   \n# x\n"])
def test_a_file_without_a_key_is_refused(text):
    with pytest.raises(KeyFileError, match=r"^k: holds no key; make one with"):
        parse_keys(text, "k")


def test_the_same_key_twice_is_refused_naming_both_lines():
    line = new_key_line()
    with pytest.raises(KeyFileError, match=r"^k:4: the same key as line 2; remove one"):
        parse_keys(f"# keys\n{line}\n{new_key_line()}\n{line}\n", "k")


def test_a_key_file_is_read_from_its_path(tmp_path):
    line = new_key_line()
    keys = load_keys(key_file(tmp_path, f"{line}\n"))
    assert keys.key_ids == (key_id(base64.b64decode(line)),)
    # Group read is allowed: a Kubernetes Secret reaches a non-root pod through its fsGroup.
    assert load_keys(key_file(tmp_path, f"{line}\n", 0o440)).key_ids == keys.key_ids


@pytest.mark.parametrize(
    ("mode", "why"),
    [
        (0o644, "every user of this machine can read it"),
        (0o604, "every user of this machine can read it"),
        (0o620, "its group can write it"),
        (0o602, "every user of this machine can write it"),
        (0o601, "every user of this machine has access to it"),
        (0o666, "its group can write it and every user of this machine can read and write it"),
    ],
)
def test_a_key_file_others_may_touch_is_refused_with_the_chmod(tmp_path, mode, why):
    path = key_file(tmp_path, new_key_line() + "\n", mode)
    with pytest.raises(KeyFileError) as raised:
        load_keys(path)
    assert str(raised.value).startswith(f"{path}: {why} (mode {mode:04o}); chmod 600 {path}")


def test_a_missing_key_file_says_how_to_make_one(tmp_path):
    path = tmp_path / "absent"
    with pytest.raises(KeyFileError, match=r"no such file; create it with `mcp-oauth-gateway"):
        load_keys(path)


def test_a_directory_a_fifo_a_huge_or_binary_file_is_refused(tmp_path):
    with pytest.raises(KeyFileError, match="not a regular file"):
        load_keys(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(KeyFileError, match="not a regular file"):
        load_keys(fifo)
    big = key_file(tmp_path, (new_key_line() + "\n") * 2000)
    with pytest.raises(KeyFileError, match="larger than 65536 bytes"):
        load_keys(big)
    binary = tmp_path / "binary"
    binary.write_bytes(b"\xff\xfe" + secrets.token_bytes(40))
    binary.chmod(0o600)
    with pytest.raises(KeyFileError, match="not text"):
        load_keys(binary)


def test_keys_are_refused_when_not_32_bytes_or_repeated():
    with pytest.raises(ValueError, match="at least one key"):
        TokenKeys.of([])
    with pytest.raises(ValueError, match="32 bytes, not 31"):
        TokenKeys.of([bytes(31)])
    key = secrets.token_bytes(32)
    with pytest.raises(ValueError, match="twice"):
        TokenKeys.of([key, key])
