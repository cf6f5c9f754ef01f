// Package testcluster starts a real, local Kubernetes control plane for
// integration tests and the demo: etcd and kube-apiserver (through
// controller-runtime's envtest) and, when workloads are wanted,
// kube-controller-manager, kube-scheduler and kwok with fake nodes, so that
// Deployments become Available and Jobs Complete without any container runtime.
//
// The binaries are built from the Go module proxy by `make testcluster` into
// .bin/testcluster at the repository root (see hack/testcluster). Start finds
// them by walking up from the working directory to the project's go.mod; the
// environment variable STYRMIN_TESTCLUSTER_BIN names another folder.
//
// Typical use in a test:
//
//	c := testcluster.StartT(t, testcluster.Options{Workloads: true})
//	cl, err := client.New(c.RESTConfig, client.Options{})
package testcluster
