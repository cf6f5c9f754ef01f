package v1alpha1

import (
	"strconv"
	"strings"
)

// Annotations and labels Styrmin puts on its objects.
const (
	// AnnotationInstanceSequence on a StyrminDeployment holds the sequence
	// of the instance it carries. The task that writes a StyrminDeployment
	// leaves one holding a higher number unchanged (the guard).
	AnnotationInstanceSequence = Group + "/instance-sequence"

	// AnnotationRequestedAt on a StyrminSource asks for a sync now: any
	// replica that receives a verified webhook push sets it (RFC 3339,
	// nanoseconds) and the elected replica, which watches it, syncs. So a
	// push reaching a replica that does not sync is not lost (as Flux's
	// reconcile.fluxcd.io/requestedAt).
	AnnotationRequestedAt = Group + "/requested-at"
	// AnnotationSyncPath on a StyrminSource names the folder of the
	// repository ("." for its root) whose locks its recorded sync position
	// is of, with spec.cluster: an agent that reads another folder walks
	// from the root. An annotation, not a field of the spec, so a
	// StyrminSource CRD an upgrade left as it was (Helm never upgrades
	// crds/) keeps it.
	AnnotationSyncPath = Group + "/sync-path"

	// SensitiveSecretName is the Secret, in a deployment's namespace, that
	// holds the values of its sensitive parameters by placeholder digest
	// (resolver.Placeholder). Instances, StyrminDeployments and release
	// records hold only the placeholders; the agent writes this Secret
	// from git and puts the values into the objects as it applies them.
	SensitiveSecretName = "styrmin-sensitive"

	// LabelCluster, LabelEnvironment and LabelDeployment identify the
	// deployment a StyrminDeployment or StyrminTask belongs to, so both can
	// be listed by deployment with a label selector.
	LabelCluster     = Group + "/cluster"
	LabelEnvironment = Group + "/environment"
	LabelDeployment  = Group + "/deployment"
	// LabelOperation on an operation task names its StyrminBackup or
	// StyrminRestore; LabelOperationKind says which (backup, restore).
	LabelOperation     = Group + "/operation"
	LabelOperationKind = Group + "/operation-kind"
	// LabelSequence on a StyrminTask is the sequence it applies.
	LabelSequence = Group + "/sequence"
	// LabelTask names the StyrminTask a Job the agent made for a step
	// belongs to (with the deployment's labels): the task controller waits
	// for such a Job, and the drift check holds while one has not ended.
	LabelTask = Group + "/task"

	// FinalizerRelease keeps a StyrminDeployment until its Helm release is
	// uninstalled.
	FinalizerRelease = Group + "/release"

	// FieldManager is the server-side apply field manager of everything the
	// agent applies (the chart's objects and StyrminDeployments).
	FieldManager = "styrmin"

	// ActionsFieldManager is the field manager of the replicas a driver's
	// stopComponents and startComponents steps set: the agent's own
	// scaling, told apart from the chart's and from a person's.
	ActionsFieldManager = "styrmin-actions"

	// ReplicasHandoverManager is the field manager that holds a
	// workload's replicas at their live value once a revision stops
	// setting them (the release's handover to an autoscaler): the chart's
	// last count, not a scale from outside Styrmin.
	ReplicasHandoverManager = FieldManager + "-replicas-handover"
)

// Instance kinds, as in the lockfile.
const (
	KindInstance  = "Instance"
	KindTombstone = "Tombstone"
)

// DeploymentID names one deployment: cluster/environment/name.
type DeploymentID struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Cluster string `json:"cluster"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Environment string `json:"environment"`
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
}

// String returns "cluster/environment/name".
func (id DeploymentID) String() string {
	return id.Cluster + "/" + id.Environment + "/" + id.Name
}

// Labels returns the identity labels of the deployment.
func (id DeploymentID) Labels() map[string]string {
	return map[string]string{
		LabelCluster:     id.Cluster,
		LabelEnvironment: id.Environment,
		LabelDeployment:  id.Name,
	}
}

// DriverRef pins the exact driver version an instance was resolved with.
type DriverRef struct {
	// Name of the driver.
	// +optional
	Name string `json:"name,omitempty"`
	// Version of the driver (semver).
	// +optional
	Version string `json:"version,omitempty"`
	// Digest of the driver's folder ("sha256:<hex>").
	// +optional
	Digest string `json:"digest,omitempty"`
}

// String returns "name@version".
func (d DriverRef) String() string { return d.Name + "@" + d.Version }

// DriverSource is where a driver version kept in another git repository
// comes from, as its lock recorded it.
type DriverSource struct {
	// URL of the driver's repository (never with credentials).
	// +kubebuilder:validation:MinLength=1
	URL string `json:"url"`
	// Ref the lock resolved (a tag, a branch or a commit), for people: the
	// agent fetches Commit.
	// +optional
	Ref string `json:"ref,omitempty"`
	// Path of the driver's folder in the repository ("." for the root).
	// +optional
	Path string `json:"path,omitempty"`
	// Commit the ref resolved to when the instance was locked.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{40}$`
	Commit string `json:"commit"`
}

// ObjectRef names one Kubernetes object applied for a deployment.
type ObjectRef struct {
	// APIVersion of the object ("apps/v1").
	APIVersion string `json:"apiVersion"`
	// Kind of the object.
	Kind string `json:"kind"`
	// Namespace of the object ("" for cluster-scoped objects).
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Name of the object.
	Name string `json:"name"`
	// Component of the driver the object belongs to ("" when shared).
	// +optional
	Component string `json:"component,omitempty"`
}

// String returns "Kind/namespace/name" (or "Kind/name").
func (r ObjectRef) String() string {
	if r.Namespace == "" {
		return r.Kind + "/" + r.Name
	}
	return r.Kind + "/" + r.Namespace + "/" + r.Name
}

// Group returns the API group of the object ("" for the core group).
func (r ObjectRef) Group() string {
	if i := strings.IndexByte(r.APIVersion, '/'); i >= 0 {
		return r.APIVersion[:i]
	}
	return ""
}

// TaskName is the name of the StyrminTask that applies a deployment's
// sequence: deterministic, so the task of a lock commit is created once
// however often the commit is walked.
func TaskName(deployment string, sequence int64) string {
	return deployment + "-" + strconv.FormatInt(sequence, 10)
}
