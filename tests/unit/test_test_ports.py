"""The examples the end-to-end tests copy get the test's ports in one pass (support.with_ports):
a port handed out may contain another documented port's digits."""

from __future__ import annotations

from support import with_ports


def test_a_port_already_put_in_is_not_rewritten_by_the_next():
    text = "url: http://127.0.0.1:8080/mcp\nissuer: http://127.0.0.1:9000/\nbackend: 8000\n"
    ports = {"8080": 18000, "9000": 19000, "8000": 11522}
    assert with_ports(text, ports) == (
        "url: http://127.0.0.1:18000/mcp\nissuer: http://127.0.0.1:19000/\nbackend: 11522\n"
    )


def test_only_whole_numbers_are_ports():
    assert with_ports("80800 18080 8080", {"8080": 12345}) == "80800 18080 12345"


def test_no_ports_leave_the_text_as_it_is():
    assert with_ports("port: 8080", {}) == "port: 8080"
