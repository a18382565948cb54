"""Provisioning tools for the two identity providers (Keycloak = A, authentik = B)."""
