"""Every form of Redis URL operators give, read one way, and shown without passwords."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.redis_targets import parse_redis_url, shown_redis_url


def test_a_single_server_url_is_left_to_redis_py_as_it_is() -> None:
    for url, tls in (
        ("redis://:pw@127.0.0.1:6379/2", False),
        ("rediss://u:pw@redis.example:6380/0", True),
        ("unix:///run/redis.sock", False),
    ):
        target = parse_redis_url(url)
        assert (target.kind, target.url, target.tls) == ("single", url, tls)


def test_a_sentinel_url_names_the_sentinels_the_service_the_database_and_both_passwords() -> None:
    target = parse_redis_url(
        "rediss+sentinel://:srv%40pw@h1:26379,[::1]:26380,h3/mymaster/3?sentinel_password=sen"
    )
    assert target.kind == "sentinel"
    assert target.nodes == (("h1", 26379), ("::1", 26380), ("h3", 26379))
    assert (target.service, target.db, target.tls) == ("mymaster", 3, True)
    assert (target.password, target.sentinel_password) == ("srv@pw", "sen")


def test_a_cluster_url_names_its_seed_nodes() -> None:
    target = parse_redis_url("redis+cluster://:pw@h1:7000,h2:7001/")
    assert target.kind == "cluster"
    assert target.nodes == (("h1", 7000), ("h2", 7001))
    assert (target.password, target.db) == ("pw", 0)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://h:6379/0", "is not a Redis URL"),
        ("redis+sentinel://h1:26379,h2:26379", "name the Sentinel service"),
        ("redis+sentinel://h1:26379/mymaster/x", "is not a number"),
        ("redis+sentinel://h1:26379/a/b/c", "name the Sentinel service"),
        ("redis+sentinel://h1:26379/m?password=x", "unknown parameter password"),
        ("redis+cluster://h1:7000/3", "database 0 only"),
        ("redis+cluster://h1:7000/?sentinel_password=x", "takes none"),
        ("redis+cluster://:pw@/", "names no host"),
        ("redis+cluster://h1:notaport/", "is not HOST:PORT"),
    ],
)
def test_a_url_that_names_no_redis_is_refused_saying_which_forms_work(url: str, says: str) -> None:
    with pytest.raises(ValueError, match=says) as refused:
        parse_redis_url(url, "--redis-url")
    assert "pw" not in str(refused.value).replace("password", "")


def test_passwords_are_never_shown() -> None:
    for url in (
        "redis://:secret@h:6379/0",
        "redis+sentinel://user:secret@h1,h2/m/0?sentinel_password=secret",
        "rediss+cluster://:secret@h1:7000,h2:7001/",
    ):
        assert "secret" not in shown_redis_url(url)
        assert "secret" not in repr(parse_redis_url(url))
        assert "secret" not in parse_redis_url(url).shown
