"""Unit tests of each Broker endpoint, driven in process through the stage harness."""
