"""Kubernetes controller mode: the resources come from an API server (watched), the status of
every object goes back to it (written by one replica, the holder of a Lease)."""
