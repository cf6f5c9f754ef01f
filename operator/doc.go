// Package operator is the facade of the in-cluster agent: NewAgent clones
// the desired-state repository and builds one controller manager with
// every runnable added to it. The packages below it own one concept each,
// and dependencies point down this list:
//
//	source        git → StyrminTasks (the sync walk), the locker, polling and triggers
//	task          the task controller, its steps and the action primitives
//	deployment    the StyrminDeployment controller and its metrics
//	release       Helm-format release records, apply, prune, uninstall, drift
//	instance      the task ↔ StyrminDeployment contract: spec ↔ instance, the guard, locks
//	health        workload and component readiness
//	driversource  the driver versions instances pin, with their error classes
//	internal/outcome  the error classes and the one mapping to a result
//	webhook       the GitHub webhook handler and its server
//
// The facade also installs the CRDs (InstallCRDs), builds the scheme and
// the manager (NewManager: cache, rate limits, leader election, the
// release engine and the StyrminDeployment controller) and decides the
// soft memory limit. cmd/ and e2e/ import only this package and the API
// (api/v1alpha1).
package operator
