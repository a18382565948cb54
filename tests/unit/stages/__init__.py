"""Unit tests of each pipeline stage on its own, driven through `harness` without a server."""
