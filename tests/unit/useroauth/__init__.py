"""Unit tests of the gateway as each user's OAuth client at an upstream (`useroauth`): the pure
decisions; the requests themselves are tested against real servers in tests/e2e."""
