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
//
// # The real node
//
// Options.RealNode adds one node where containers really run: a kubelet
// (v1.34, built by `make testcluster` too: later kubelets refuse cgroup v1)
// with the machine's containerd and runc, its images made from the
// machine's static busybox. It needs root; RealNodeAvailable says whether
// the machine can run it and RequireRealNode skips a test that cannot
// (fails it under CI). Pods go there only with RealNodeSelector and
// RealNodeToleration (or a namespace with RealNodeNamespaceAnnotations);
// kwok manages only the fake nodes. All of the node's state is in a folder
// of its own, removed by Stop with its processes, mounts, cgroups and
// network bridge.
//
// # Fault injection
//
// Pods on fake nodes run no process: kwok plays their lifecycle from the
// stages in StagesFile, which hack/testcluster/build.sh assembles from kwok's
// defaults (pod-ready: Running and Ready; pod-complete: a Job's pod
// Succeeded; pod-delete: a pod being deleted is removed) followed by
// hack/testcluster/fault-stages.yaml. To test a failure path, annotate the
// pods (in a Job's or Deployment's pod template) with FaultAnnotation:
//
//   - FaultFail: once Running, the pod ends Failed, every container
//     terminated with exit code 1 (reason Error, message FaultMessage); a Job
//     with backoffLimit 0 then gets the Failed condition. Pods of any owner
//     fail, so a ReplicaSet keeps replacing them: for Deployments use
//     FaultCrashLoop.
//   - FaultCrashLoop: the pod stays Running and never Ready, every container
//     waiting in CrashLoopBackOff with restartCount CrashLoopRestarts.
//   - FaultUnready: the pod stays Running with containers started but not
//     ready, so a Deployment ends Progressing=False, ProgressDeadlineExceeded
//     after its progressDeadlineSeconds.
//
// The fault stages carry a weight and kwok's defaults none; when several
// stages match a pod, kwok keeps only those with a weight, so a fault stage
// always wins. They never match a pod being deleted, which pod-delete removes
// as any other. A pod without the annotation, or with another value, keeps
// the default lifecycle. Set the annotation when the pod is created:
// FaultCrashLoop and FaultUnready act on a Pending pod only.
package testcluster
