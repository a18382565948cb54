"""Serving: the ASGI entry point, the pipeline assembled from the stages, the proxy and the
Broker, what outlives reloads, and the admin listener."""
