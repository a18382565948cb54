"""The Lease the replicas elect a leader with, by default: its name and how long a leader's
hold lasts unrenewed. Apart from leader.py, which loads the Kubernetes client: the command
line shows them as flags' defaults."""

DEFAULT_LEASE_NAME = "mcp-oauth-gateway"
DEFAULT_DURATION = 10.0
