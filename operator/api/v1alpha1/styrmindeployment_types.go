package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StyrminDeploymentSpec is one instance of a deployment: the immutable,
// fully resolved snapshot that the lockfile records, in the shape of
// resolver.Instance.
//
// +kubebuilder:validation:XValidation:rule="(has(self.kind) && self.kind == 'Tombstone') || (has(self.driver) && has(self.driver.name) && has(self.driver.version))",message="an Instance needs driver.name and driver.version"
type StyrminDeploymentSpec struct {
	// Kind is Instance, or Tombstone for a deleted deployment: a tombstone
	// uninstalls the release and removes the StyrminDeployment.
	// +kubebuilder:validation:Enum=Instance;Tombstone
	// +kubebuilder:default=Instance
	// +optional
	Kind string `json:"kind,omitempty"`
	// Deployment is the deployment's cluster/environment/name.
	Deployment DeploymentID `json:"deployment"`
	// Sequence is the instance's number in the deployment's history: +1
	// for every new instance, never reused.
	// +kubebuilder:validation:Minimum=1
	Sequence int64 `json:"sequence"`
	// SourceCommit is the commit of the configuration the instance was
	// resolved from.
	// +optional
	SourceCommit string `json:"sourceCommit,omitempty"`
	// Digest covers everything that determines what runs (driver, app
	// version, context, values).
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	Digest string `json:"digest"`
	// Driver is the exact driver version the instance was resolved with.
	// +optional
	Driver DriverRef `json:"driver,omitempty"`
	// DriverSource is the git repository and commit the driver is fetched
	// from when it is kept outside the desired-state repository; absent
	// for a driver of its drivers/ folder.
	// +optional
	DriverSource *DriverSource `json:"driverSource,omitempty"`
	// AppVersion is the application version.
	// +optional
	AppVersion string `json:"appVersion,omitempty"`
	// Context is the resolved context (cluster, environment, deployment,
	// parameters, sibling services) as the resolver wrote it.
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Context *apiextensionsv1.JSON `json:"context,omitempty"`
	// Values are the chart values computed by the driver.
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`
	// Internal marks a deployment Styrmin adds itself, naming the service
	// it provides: ingress (a cluster's or an environment's ingress
	// controller). Absent for applications. The digest covers it.
	// +kubebuilder:validation:Enum=ingress
	// +optional
	Internal string `json:"internal,omitempty"`
	// BackupFirst makes an upgrade of the deployment take a backup (the
	// driver's backup hook) before its pre steps (backupBeforeUpgrade).
	// +optional
	BackupFirst bool `json:"backupFirst,omitempty"`
}

// Tombstone reports whether the spec records a deleted deployment.
func (s *StyrminDeploymentSpec) Tombstone() bool { return s.Kind == KindTombstone }

// StyrminDeploymentStatus is what the agent observed.
type StyrminDeploymentStatus struct {
	// ObservedGeneration is the generation of the spec the status
	// describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// AppliedSequence is the sequence of the instance whose objects the
	// cluster holds (its release applied). It can be ahead of
	// ActiveSequence while a task runs its post steps or after one failed.
	// +optional
	AppliedSequence int64 `json:"appliedSequence,omitempty"`
	// AppliedDigest is the digest of that instance.
	// +optional
	AppliedDigest string `json:"appliedDigest,omitempty"`
	// AppliedAs is the user the release was last applied as: the service
	// account the environment's policy names, impersonated, or empty for
	// the agent's own identity. The release is uninstalled as that user
	// after its deployment is deleted (a tombstone names no policy).
	// +optional
	AppliedAs string `json:"appliedAs,omitempty"`
	// LegacyActiveDigest is what agents before appliedDigest wrote there
	// (activeDigest): read once so that an upgraded agent does not apply
	// every release again; never written.
	// +optional
	LegacyActiveDigest string `json:"activeDigest,omitempty"`
	// ActiveSequence is the sequence of the active instance: the last one
	// whose task succeeded, post steps included. The next task chooses its
	// workflow against it. Written by the task controller, or with the Ready
	// condition when the task's last step is the one that writes the instance.
	// +optional
	ActiveSequence int64 `json:"activeSequence,omitempty"`
	// Active summarises the active instance (written with ActiveSequence).
	// +optional
	Active *ActiveInstance `json:"active,omitempty"`
	// Release is the Helm release that runs the instance.
	// +optional
	Release *ReleaseStatus `json:"release,omitempty"`
	// Conditions: Ready, Reconciling, Stalled, Drifted.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Inventory lists the objects of the active release, sorted.
	// +listType=atomic
	// +optional
	Inventory []ObjectRef `json:"inventory,omitempty"`
	// Components is the observed state of each driver component, sorted
	// by name.
	// +listType=map
	// +listMapKey=name
	// +optional
	Components []ComponentStatus `json:"components,omitempty"`
	// LastDriftCheck is when the live objects were last compared with the
	// release's manifest.
	// +optional
	LastDriftCheck *metav1.Time `json:"lastDriftCheck,omitempty"`
	// LastDriftCorrection describes the last time drift was put back.
	// +optional
	LastDriftCorrection *DriftCorrection `json:"lastDriftCorrection,omitempty"`
	// DriftCorrections counts the drift corrections since the
	// StyrminDeployment was created.
	// +optional
	DriftCorrections int64 `json:"driftCorrections,omitempty"`
}

// ActiveInstance summarises a deployment's active instance: what the next
// task's workflow is chosen against.
type ActiveInstance struct {
	// Sequence of the instance.
	Sequence int64 `json:"sequence"`
	// Kind is Instance, or Tombstone for a deletion.
	// +optional
	Kind string `json:"kind,omitempty"`
	// Digest of the instance.
	// +optional
	Digest string `json:"digest,omitempty"`
	// Driver the instance runs.
	// +optional
	Driver DriverRef `json:"driver,omitempty"`
	// AppVersion of the application.
	// +optional
	AppVersion string `json:"appVersion,omitempty"`
	// Task is the name of the task that made it active.
	// +optional
	Task string `json:"task,omitempty"`
}

// ReleaseStatus describes the Helm release of a deployment.
type ReleaseStatus struct {
	// Name of the release (the deployment's name).
	Name string `json:"name"`
	// Revision of the release last installed or upgraded.
	Revision int `json:"revision"`
	// Chart is "name-version" of the chart.
	// +optional
	Chart string `json:"chart,omitempty"`
	// Status is Helm's status of that revision (deployed, failed, …).
	// +optional
	Status string `json:"status,omitempty"`
	// LastAppliedTime is when the revision was applied.
	// +optional
	LastAppliedTime *metav1.Time `json:"lastAppliedTime,omitempty"`
	// ManifestDigest is the digest (sha256) of the manifest the agent
	// wrote in the revision's record: a record whose manifest differs was
	// changed outside the agent, and is not trusted.
	// +optional
	ManifestDigest string `json:"manifestDigest,omitempty"`
}

// ComponentStatus is the observed state of one driver component.
type ComponentStatus struct {
	// Name of the component.
	Name string `json:"name"`
	// Ready is true when every workload of the component is ready.
	Ready bool `json:"ready"`
	// DesiredReplicas is the sum of the workloads' desired replicas.
	DesiredReplicas int32 `json:"desiredReplicas"`
	// ReadyReplicas is the sum of the workloads' ready replicas (pods).
	ReadyReplicas int32 `json:"readyReplicas"`
	// Workloads of the component, sorted by kind and name.
	// +listType=atomic
	// +optional
	Workloads []WorkloadStatus `json:"workloads,omitempty"`
}

// WorkloadStatus is the observed state of one workload.
type WorkloadStatus struct {
	// Kind of the workload: Deployment, StatefulSet, DaemonSet.
	Kind string `json:"kind"`
	// Name of the workload.
	Name string `json:"name"`
	// DesiredReplicas is spec.replicas (the scheduled count for a DaemonSet).
	DesiredReplicas int32 `json:"desiredReplicas"`
	// ReadyReplicas is the count of ready pods.
	ReadyReplicas int32 `json:"readyReplicas"`
	// UpdatedReplicas is the count of pods at the current template.
	// +optional
	UpdatedReplicas int32 `json:"updatedReplicas,omitempty"`
	// Ready is true when the workload's controller observed its current
	// generation and every desired pod is updated and ready.
	Ready bool `json:"ready"`
	// Message says why the workload is not ready.
	// +optional
	Message string `json:"message,omitempty"`
	// Failed is true when the workload cannot become ready without a
	// change (kstatus Failed: a rollout past its progress deadline).
	// +optional
	Failed bool `json:"failed,omitempty"`
	// Pods that are not ready, for a workload failed or not ready for a
	// while (at most a few, sorted by name).
	// +listType=atomic
	// +optional
	Pods []PodStatus `json:"pods,omitempty"`
}

// PodStatus is the observed state of one pod that is not ready.
type PodStatus struct {
	// Name of the pod.
	Name string `json:"name"`
	// Phase of the pod (Pending, Running, Failed, …).
	Phase string `json:"phase"`
	// Ready is the pod's Ready condition.
	Ready bool `json:"ready"`
	// Restarts sums its containers' restarts.
	// +optional
	Restarts int32 `json:"restarts,omitempty"`
	// Reason is the first container's waiting or terminated reason
	// (CrashLoopBackOff, ImagePullBackOff, Error), else the pod's.
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message goes with Reason.
	// +optional
	Message string `json:"message,omitempty"`
}

// DriftCorrection describes one correction of drift.
type DriftCorrection struct {
	// Time the drift was put back.
	Time metav1.Time `json:"time"`
	// Objects that had drifted, sorted.
	// +listType=atomic
	Objects []DriftedObject `json:"objects"`
}

// DriftedObject is one object whose live state differed from the
// release's manifest.
type DriftedObject struct {
	ObjectRef `json:",inline"`
	// Missing is true when the object had been deleted.
	// +optional
	Missing bool `json:"missing,omitempty"`
	// Fields that had drifted, as paths (".spec.replicas",
	// ".data.key"), sorted.
	// +listType=atomic
	// +optional
	Fields []string `json:"fields,omitempty"`
}

// StyrminDeployment is one deployment of an application in its namespace,
// named after that namespace. Its spec is the instance to run; the agent
// installs it as a Helm release, reports what runs and corrects drift.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sdeploy,categories=styrmin
// +kubebuilder:printcolumn:name="Environment",type=string,JSONPath=`.spec.deployment.environment`,priority=1
// +kubebuilder:printcolumn:name="Deployment",type=string,JSONPath=`.spec.deployment.name`,priority=1
// +kubebuilder:printcolumn:name="Internal",type=string,JSONPath=`.spec.internal`,priority=1
// +kubebuilder:printcolumn:name="Sequence",type=integer,JSONPath=`.spec.sequence`
// +kubebuilder:printcolumn:name="Applied",type=integer,JSONPath=`.status.appliedSequence`
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.activeSequence`
// +kubebuilder:printcolumn:name="App",type=string,JSONPath=`.spec.appVersion`
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.spec.driver.name`
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.driver.version`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StyrminDeployment struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StyrminDeploymentSpec   `json:"spec"`
	Status StyrminDeploymentStatus `json:"status,omitempty"`
}

// StyrminDeploymentList is a list of StyrminDeployments.
//
// +kubebuilder:object:root=true
type StyrminDeploymentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StyrminDeployment `json:"items"`
}

func init() {
	SchemeBuilder.Register(&StyrminDeployment{}, &StyrminDeploymentList{})
}
