"""Test support for a real Kubernetes API server (tools/dev_apiserver.py) and the CRDs it serves.

The server is the standalone apiextensions-apiserver: custom resources only, and no discovery, so
kubectl and Helm do not work against it; address objects by group/version/plural.
"""
