"""Test support for real Kubernetes API servers and the CRDs they serve.

- `apiserver.DevApiServer` (tools/dev_apiserver.py): the standalone apiextensions-apiserver,
  custom resources only and no discovery, so kubectl and Helm do not work against it; address
  objects by group/version/plural. The `apiserver` fixture, one for the session.
- `cluster.DevCluster` (tools/dev_cluster.py): kube-apiserver with core kinds, RBAC, discovery
  and ServiceAccount tokens, with kubectl and Helm. The `kube_apiserver` fixture, one per module.
"""
