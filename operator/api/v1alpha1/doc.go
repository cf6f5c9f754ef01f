// Package v1alpha1 holds the styrmin.io/v1alpha1 Kubernetes API of the
// Styrmin agent: StyrminDeployment (one per deployment, the running
// instance), StyrminTask (one run of a workflow for one sequence) and
// StyrminSource (the agent's sync position in the desired-state repository).
//
// The CRDs in config/crd are generated from these types:
//
//	go generate ./operator/api/...
//
// +kubebuilder:object:generate=true
// +groupName=styrmin.io
package v1alpha1

//go:generate go run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.23.0 object paths=. crd:crdVersions=v1 output:crd:artifacts:config=../../../config/crd

// The Helm chart carries the same CRDs (charts: TestChartCRDsAreConfigCRDs).
//go:generate sh -c "cp ../../../config/crd/*.yaml ../../../charts/styrmin-agent/crds/"
