"""`mcp-oauth-gateway grants`: `new-key` prints a key line the key file takes; `list` shows
whose grants there are, at which backend, until when and under which key (never a token), and
marks those no key of the file opens; `remove` removes one user's grants (or one backend's),
saying how many, and fails naming the user when there were none; `reseal` moves every grant to
the first key. A bad flag, URL or key file is one line naming the flag and the fix, exit 2; a
store that cannot be reached is one line, exit 1."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest

from mcp_oauth_gateway import cli
from mcp_oauth_gateway.usertokens import new_key_line, open_store
from support import free_port
from unit.usertokens.store_support import ALICE, ALICE_LINEAR, BOB, ISSUER, grant, keys


def key_file(tmp_path: Path, *lines: str, name: str = "keys") -> Path:
    path = tmp_path / name
    path.write_text("".join(f"{line}\n" for line in lines))
    path.chmod(0o600)
    return path


def seeded(tmp_path: Path, *lines: str) -> str:
    """A SQLite store holding alice's two grants and bob's, sealed with the first of `lines`."""
    url = f"sqlite://{tmp_path}/grants.db"

    async def seed() -> None:
        store = open_store(url, keys(*lines))
        for key in (ALICE, ALICE_LINEAR, BOB):
            await store.put(key, grant(key, 2 if key is BOB else 1))
        await store.close()

    asyncio.run(seed())
    return url


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def store_flags(url: str, path: Path) -> tuple[str, ...]:
    return ("--user-token-store", url, "--user-token-key", str(path))


def test_new_key_prints_a_line_the_key_file_takes(capsys, tmp_path):
    code, out, err = run(capsys, "grants", "new-key")
    assert code == 0
    assert err == ""
    line = out.strip()
    assert out == line + "\n"
    assert len(base64.b64decode(line, validate=True)) == 32
    url = seeded(tmp_path, line)
    code, out, _ = run(capsys, "grants", "list", *store_flags(url, key_file(tmp_path, line)))
    assert code == 0
    assert keys(line).sealing_id in out


def test_list_shows_whose_grants_and_never_a_token(capsys, tmp_path):
    line = new_key_line()
    flags = store_flags(seeded(tmp_path, line), key_file(tmp_path, line))
    code, out, err = run(capsys, "grants", "list", *flags)
    assert code == 0, err
    header, *rows = out.splitlines()
    assert header.split() == [
        *("ISSUER", "SUBJECT", "BACKEND", "SCOPE"),
        *("OBTAINED", "REFRESHED", "EXPIRES", "KEY", "ID"),
    ]
    kid = keys(line).sealing_id
    assert rows[0].split() == [
        *(ISSUER, "alice", "github", "repo\\x20read:user"),
        *("2023-11-14T22:13:20Z", "-", "2023-11-14T23:13:21Z", kid),
    ]
    assert [row.split()[1:3] for row in rows] == [
        ["alice", "github"],
        ["alice", "linear"],
        ["bob", "github"],
    ]
    assert "secret" not in out + err
    bob = ("--issuer", ISSUER, "--subject", "bob", "--output", "json")
    code, out, _ = run(capsys, "grants", "list", *flags, *bob)
    assert code == 0
    assert json.loads(out) == [
        {
            "issuer": ISSUER,
            "subject": "bob",
            "backend": "github",
            "scope": "repo read:user",
            "obtained": "2023-11-14T22:13:20Z",
            "refreshed": "2023-11-14T22:13:22Z",
            "expires": "2023-11-14T23:13:22Z",
            "key_id": kid,
            "key_held": True,
        }
    ]


def test_list_marks_grants_no_key_of_the_file_opens(capsys, tmp_path):
    lost, new = new_key_line(), new_key_line()
    flags = store_flags(seeded(tmp_path, lost), key_file(tmp_path, new))
    code, out, _ = run(capsys, "grants", "list", *flags)
    assert code == 0
    assert f"{keys(lost).sealing_id}*" in out
    assert "* 3 sealed with a key --user-token-key does not hold" in out


def test_remove_removes_one_users_grants_and_says_how_many(capsys, tmp_path):
    line = new_key_line()
    url, path = seeded(tmp_path, line), key_file(tmp_path, line)
    alice = (*store_flags(url, path), "--issuer", ISSUER, "--subject", "alice")
    code, out, _ = run(capsys, "grants", "remove", *alice, "--backend", "linear")
    whose = f"subject 'alice' of issuer '{ISSUER}'"
    assert (code, out) == (0, f"removed 1 grant of {whose} at backend 'linear'\n")
    code, out, _ = run(capsys, "grants", "remove", *alice)
    assert (code, out) == (0, f"removed 1 grant of {whose}\n")
    code, out, err = run(capsys, "grants", "remove", *alice)
    assert (code, out) == (1, "")
    assert err == (
        f"error: no grant of {whose} in {url}; `grants list` shows whose grants there are\n"
    )
    code, out, _ = run(capsys, "grants", "list", *store_flags(url, path))
    assert [row.split()[1] for row in out.splitlines()[1:]] == ["bob"]


def test_reseal_moves_every_grant_to_the_first_key(capsys, tmp_path):
    old, new = new_key_line(), new_key_line()
    url = seeded(tmp_path, old)
    both = key_file(tmp_path, new, old, name="both")
    code, out, err = run(capsys, "grants", "reseal", *store_flags(url, both))
    assert (code, out, err) == (0, f"resealed 3 grants with key id {keys(new).sealing_id}\n", "")
    only_new = store_flags(url, key_file(tmp_path, new, name="new"))
    code, out, _ = run(capsys, "grants", "list", *only_new, "--output", "json")
    assert {(g["key_id"], g["key_held"]) for g in json.loads(out)} == {(keys(new).sealing_id, True)}


def test_reseal_names_what_no_key_opens(capsys, tmp_path):
    lost, new = new_key_line(), new_key_line()
    flags = store_flags(seeded(tmp_path, lost), key_file(tmp_path, new))
    code, out, err = run(capsys, "grants", "reseal", *flags)
    assert code == 0
    assert out == f"resealed 0 grants with key id {keys(new).sealing_id}\n"
    assert err.startswith(
        f"warning: 3 grants sealed with keys --user-token-key does not hold "
        f"({keys(lost).sealing_id}) stay as they are"
    )


GOOD_STORE = "sqlite://{dir}/grants.db"


@pytest.mark.parametrize(
    ("store", "key_text", "mode", "expected"),
    [
        (GOOD_STORE, "not-a-key", 0o600, "--user-token-key {dir}/keys:1: not base64"),
        (
            GOOD_STORE,
            "{key}",
            0o644,
            "--user-token-key {dir}/keys: every user of this machine can read it (mode 0644); "
            "chmod 600 {dir}/keys",
        ),
        (GOOD_STORE, "", 0o600, "--user-token-key {dir}/keys: holds no key"),
        (
            "sqlite:///{dir}/grants.db",
            "{key}",
            0o600,
            "--user-token-store 'sqlite:///{dir}/grants.db': more than three slashes",
        ),
        ("http://127.0.0.1/x", "{key}", 0o600, "--user-token-store 'http://127.0.0.1/x': not a"),
        (
            "sqlite://{dir}/typo.db",
            "{key}",
            0o600,
            "--user-token-store sqlite://{dir}/typo.db: no such file",
        ),
    ],
)
def test_a_bad_flag_is_one_line_naming_it_and_the_fix(
    capsys, tmp_path, store, key_text, mode, expected
):
    line = new_key_line()
    seeded(tmp_path, line)
    path = tmp_path / "keys"
    path.write_text(key_text.format(key=line) + "\n")
    path.chmod(mode)
    code, out, err = run(capsys, "grants", "list", *store_flags(store.format(dir=tmp_path), path))
    assert code == 2
    assert out == ""
    assert err.startswith("error: " + expected.format(dir=tmp_path)), err
    assert err.count("\n") == 1
    assert not (tmp_path / "typo.db").exists(), "the operator's commands make no store"


def test_a_store_that_cannot_be_reached_is_one_line(capsys, tmp_path):
    url = f"redis://:pw@127.0.0.1:{free_port()}/0"
    code, _, err = run(
        capsys, "grants", "list", *store_flags(url, key_file(tmp_path, new_key_line()))
    )
    assert code == 1
    assert err.startswith("error: user token store redis://***@127.0.0.1:")
    assert err.count("\n") == 1
    assert "pw" not in err


def test_the_flags_are_required(capsys):
    with pytest.raises(SystemExit) as raised:
        cli.main(["grants", "remove", "--user-token-store", "sqlite:///x", "--issuer", "i"])
    assert raised.value.code == 2
    assert "--user-token-key" in capsys.readouterr().err
