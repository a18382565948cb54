"""`serve`/`check --user-token-store`: every Redis form operators run is taken, anything else is
refused in one line naming the flag, and never with the URL's passwords."""

from __future__ import annotations

import argparse

import pytest

from mcp_oauth_gateway.cli.common import Refused
from mcp_oauth_gateway.cli.user_token_flags import store_kind, user_token_settings
from mcp_oauth_gateway.usertokens.keys import new_key_line


@pytest.mark.parametrize(
    "url",
    [
        "redis://:pw@127.0.0.1:6379/0",
        "rediss://:pw@cache:6380/1",
        "unix:/run/redis.sock",
        "redis+sentinel://:pw@s1:26379,s2:26379/mymaster/0?sentinel_password=spw",
        "redis+cluster://:pw@c1:7000,c2:7001/",
    ],
)
def test_every_redis_form_is_a_redis_store(url, tmp_path):
    assert store_kind(url) == "redis"
    key = tmp_path / "key"
    key.write_text(new_key_line() + "\n")
    key.chmod(0o600)
    args = argparse.Namespace(user_token_key=str(key), user_token_store=url)
    settings = user_token_settings(args)
    assert settings is not None
    assert settings.store_url == url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://:pw@cache/0", "is not a Redis URL"),
        ("redis+sentinel://:pw@s1:26379/", "name the Sentinel service"),
        ("redis+cluster://:pw@c1:7000/?sentinel_password=spw", "unknown parameter"),
    ],
)
def test_anything_else_is_refused_naming_the_flag_and_no_password(url, says):
    with pytest.raises(Refused) as refused:
        store_kind(url)
    message = str(refused.value)
    assert message.startswith("--user-token-store ")
    assert says in message
    assert "sqlite:///ABSOLUTE/PATH" in message
    assert "pw" not in message
