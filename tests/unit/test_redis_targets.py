"""Every form of Redis URL operators give, read one way, and shown without passwords."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.redis_clients import tls_options
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
        (
            "redis+cluster://h1:7000/?sentinel_password=x",
            "a Cluster URL acks, ack_timeout_ms and ssl_ca_certs",
        ),
        ("redis://h:1/0?acks=many", "not a number of replicas"),
        ("redis+sentinel://h:1/m?acks=-1", "not a number of replicas"),
        ("redis+cluster://h:1/?ack_timeout_ms=0", "milliseconds from 1"),
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


def test_critical_writes_wait_for_one_replica_by_default_where_replicas_exist() -> None:
    assert parse_redis_url("redis://h:6379/0").acks == 0
    assert parse_redis_url("redis+sentinel://h:1/m").acks == 1
    assert parse_redis_url("redis+cluster://h:1/").acks == 1
    chosen = parse_redis_url("redis+sentinel://h:1/m?acks=2&ack_timeout_ms=250")
    assert (chosen.acks, chosen.ack_timeout_ms) == (2, 250)


def test_the_gateway_s_own_parameters_are_taken_off_a_single_server_url() -> None:
    target = parse_redis_url("redis://:pw@h:6379/0?acks=1&socket_keepalive=true&ack_timeout_ms=9")
    assert (target.acks, target.ack_timeout_ms) == (1, 9)
    assert target.url == "redis://:pw@h:6379/0?socket_keepalive=true"


def test_a_unix_socket_path_is_given_to_redis_py_in_the_form_it_reads() -> None:
    assert parse_redis_url("unix:/run/redis.sock").url == "unix:///run/redis.sock"
    assert parse_redis_url("unix:///run/redis.sock?db=2").url == "unix:///run/redis.sock?db=2"


@pytest.mark.parametrize(
    "url",
    [
        "redis://:pa/ss@h:1/0",
        "redis+sentinel://:pa?ss@h:1/m",
        "redis+cluster://:pa#ss@h:1/",
        "redis://:pass\n@h:1/0",
    ],
)
def test_a_password_written_unencoded_is_not_shown_in_part(url: str) -> None:
    shown = shown_redis_url(url)
    assert "pa" not in shown
    assert "ss" not in shown.replace("redis", "")


def test_a_url_with_credentials_is_shown_to_have_them() -> None:
    assert shown_redis_url("redis://:pw@h:6379/0") == "redis://***@h:6379/0"
    assert shown_redis_url("redis://h:6379/0") == "redis://h:6379/0"


def test_tls_with_a_ca_file_reaches_every_connection_of_a_sentinel_set_or_cluster() -> None:
    sentinel = parse_redis_url("rediss+sentinel://h:1/m?ssl_ca_certs=/etc/redis/ca.pem")
    assert tls_options(sentinel) == {"ssl": True, "ssl_ca_certs": "/etc/redis/ca.pem"}
    assert tls_options(parse_redis_url("redis+cluster://h:1/")) == {"ssl": False}
    single = parse_redis_url("rediss://h:1/0?ssl_ca_certs=/etc/redis/ca.pem&acks=1")
    assert single.url == "rediss://h:1/0?ssl_ca_certs=%2Fetc%2Fredis%2Fca.pem"
