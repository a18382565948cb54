"""Test support for real Kubernetes API servers and the CRDs they serve.

One server, kube-apiserver v1.36 with etcd (tools/dev_cluster.py: core kinds, RBAC, discovery,
ServiceAccount tokens), built once for every test:

- `apiserver.DevApiServer`: the test's HTTPS calls to it as the admin (`system:masters`), by
  group/version/plural, and its start, restart and stop.
- `cluster.DevCluster`: the same with kubectl and Helm, and ServiceAccount kubeconfigs.

Two fixtures start it: `apiserver`, one for the session, with the CRDs of `crds/` and
NamespaceLifecycle off (the controller-mode modules name namespaces they never create, and
need no RBAC); `kube_apiserver`, a fresh one for each module that installs things or tests
RBAC and tenancy.
"""
