package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// OperationPhase is where a backup or a restore is. Succeeded and Failed
// are terminal; a Failed restore keeps its deployments waiting until it is
// retried or deleted.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed
type OperationPhase string

// The operation phases.
const (
	OperationPending   OperationPhase = "Pending"
	OperationRunning   OperationPhase = "Running"
	OperationSucceeded OperationPhase = "Succeeded"
	OperationFailed    OperationPhase = "Failed"
)

// Terminal reports whether the phase is final.
func (p OperationPhase) Terminal() bool { return p == OperationSucceeded || p == OperationFailed }

// The rules are on the spec, one a field so that each message names it:
// a rule on an optional field runs only when the field is there before and
// after, and would let it be set or unset. An optional field unset counts
// as its zero value, as it does for the agent. They compare with oldSelf,
// so they judge updates only: objects made before them, and every write
// that keeps the spec (finalizers, status), pass. Kept out of the doc
// comment so that this note stays out of the CRD's description.
// +kubebuilder:validation:XValidation:rule="(has(self.cluster) ? self.cluster : '') == (has(oldSelf.cluster) ? oldSelf.cluster : '')",message="spec.cluster is immutable: create a new StyrminBackup for the cluster wanted",fieldPath=".cluster"
// +kubebuilder:validation:XValidation:rule="self.environment == oldSelf.environment",message="spec.environment is immutable: create a new StyrminBackup of the environment wanted",fieldPath=".environment"
// +kubebuilder:validation:XValidation:rule="(has(self.deployments) ? self.deployments : []) == (has(oldSelf.deployments) ? oldSelf.deployments : [])",message="spec.deployments is immutable: create a new StyrminBackup of the deployments wanted",fieldPath=".deployments"

// StyrminBackupSpec says what to back up: an environment, or some of its
// deployments. It does not change once the backup is created (the API
// server refuses an edit): the artefacts' deletion runs the deleteBackup
// hook of this environment, with its credentials, and a clone takes a
// backup without deployments for one of the whole environment, so an edit
// would have them act on artefacts that are not what it says.
type StyrminBackupSpec struct {
	// Cluster is the cluster the environment belongs to; empty means the
	// agent's own.
	// +optional
	Cluster string `json:"cluster,omitempty"`
	// Environment whose deployments are backed up.
	// +kubebuilder:validation:MinLength=1
	Environment string `json:"environment"`
	// Deployments, by name, to back up; empty means every deployment of
	// the environment (internal ones excepted).
	// +listType=set
	// +optional
	Deployments []string `json:"deployments,omitempty"`
}

// StyrminBackupStatus is a backup's progress and result.
type StyrminBackupStatus struct {
	// Phase of the backup as a whole: Succeeded when every deployment's
	// backup succeeded, Failed when one failed or the backup was refused.
	// +optional
	Phase OperationPhase `json:"phase,omitempty"`
	// Location is the environment's backup location when the backup
	// started (a URL: s3://… or pvc://…).
	// +optional
	Location string `json:"location,omitempty"`
	// Deployments are the result per deployment, in name order.
	// +listType=atomic
	// +optional
	Deployments []OperationDeployment `json:"deployments,omitempty"`
	// Skipped are the deployments of a whole environment's backup whose
	// drivers declare no backup hook, each with why ("web: driver
	// webapp@1.1.0 declares no backup hook"): nothing of theirs is kept.
	// +listType=atomic
	// +optional
	Skipped []string `json:"skipped,omitempty"`
	// StartedAt is when the backup's tasks were created.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the backup reached a terminal phase.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Message says why the backup failed or was refused.
	// +optional
	Message string `json:"message,omitempty"`
	// Conditions of the backup (Ready, Reconciling, Stalled).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// OperationDeployment is one deployment's part of a backup or a restore.
type OperationDeployment struct {
	// Name of the deployment.
	Name string `json:"name"`
	// Namespace of the deployment.
	Namespace string `json:"namespace"`
	// Task is the StyrminTask (in Namespace) that runs the driver's hook.
	// +optional
	Task string `json:"task,omitempty"`
	// Attempt counts a restore's runs for the deployment (1 first).
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// Phase of the deployment's part.
	// +optional
	Phase OperationPhase `json:"phase,omitempty"`
	// Artifact is where the deployment's backup is (or, for a restore,
	// the one it restores).
	// +optional
	Artifact string `json:"artifact,omitempty"`
	// Size of the artefact in bytes, as the driver's job reported it
	// (0: not reported).
	// +optional
	Size int64 `json:"size,omitempty"`
	// Sequence is the instance sequence that was active when the hook ran.
	// +optional
	Sequence int64 `json:"sequence,omitempty"`
	// Driver is the driver version whose hook ran.
	// +optional
	Driver DriverRef `json:"driver,omitempty"`
	// StartedAt is when the deployment's task started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the deployment's task ended.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Message says why the deployment's part failed.
	// +optional
	Message string `json:"message,omitempty"`
}

// StyrminBackup is a backup of an environment (or some of its
// deployments): the agent runs each deployment's driver backup hook as a
// task of that deployment, ordered with its other tasks, and records where
// each artefact went. Its name is the backup's ID.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=sbackup,categories=styrmin
// +kubebuilder:printcolumn:name="Environment",type=string,JSONPath=`.spec.environment`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Location",type=string,JSONPath=`.status.location`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StyrminBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StyrminBackupSpec   `json:"spec"`
	Status StyrminBackupStatus `json:"status,omitempty"`
}

// StyrminBackupList is a list of StyrminBackups.
//
// +kubebuilder:object:root=true
type StyrminBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StyrminBackup `json:"items"`
}

// As on StyrminBackupSpec, one rule a field, on the spec.
// +kubebuilder:validation:XValidation:rule="self.backup == oldSelf.backup",message="spec.backup is immutable: create a new StyrminRestore from the backup wanted",fieldPath=".backup"
// +kubebuilder:validation:XValidation:rule="(has(self.deployments) ? self.deployments : []) == (has(oldSelf.deployments) ? oldSelf.deployments : [])",message="spec.deployments is immutable: create a new StyrminRestore of the deployments wanted",fieldPath=".deployments"

// StyrminRestoreSpec says which backup to restore, to which deployments.
// Only Retry changes once the restore is created (the API server refuses
// another edit): what retention and a backup's deletion keep for a running
// restore, and a retry's tasks, follow Backup and Deployments, so an edit
// would free artefacts a task still reads, or have a retry restore another
// backup's artefacts under this one's name.
type StyrminRestoreSpec struct {
	// Backup is the name of the StyrminBackup (in the agent's namespace)
	// to restore from.
	// +kubebuilder:validation:MinLength=1
	Backup string `json:"backup"`
	// Deployments, by name, to restore; empty means every deployment the
	// backup holds.
	// +listType=set
	// +optional
	Deployments []string `json:"deployments,omitempty"`
	// Retry is a token: setting it to a new value runs the failed
	// deployments' restores again (`styrminctl restore retry`). The one
	// field that changes after creation.
	// +optional
	Retry string `json:"retry,omitempty"`
}

// StyrminRestoreStatus is a restore's progress and result.
type StyrminRestoreStatus struct {
	// Phase of the restore as a whole.
	// +optional
	Phase OperationPhase `json:"phase,omitempty"`
	// Environment the backup is of.
	// +optional
	Environment string `json:"environment,omitempty"`
	// Deployments are the result per deployment, in name order.
	// +listType=atomic
	// +optional
	Deployments []OperationDeployment `json:"deployments,omitempty"`
	// ObservedRetry is the spec.retry token the status answers.
	// +optional
	ObservedRetry string `json:"observedRetry,omitempty"`
	// StartedAt is when the restore's tasks were first created.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the restore reached a terminal phase.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Message says why the restore failed or was refused.
	// +optional
	Message string `json:"message,omitempty"`
	// Conditions of the restore (Ready, Reconciling, Stalled).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// StyrminRestore restores a StyrminBackup into the deployments it was
// taken of. While it runs (and while it has failed, until it is retried
// or deleted) the deployments are "restore in progress": their other
// tasks wait, so a configuration fan-out does not redeploy them, and catch
// up to their newest lock when it succeeds.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=srestore,categories=styrmin
// +kubebuilder:printcolumn:name="Backup",type=string,JSONPath=`.spec.backup`
// +kubebuilder:printcolumn:name="Environment",type=string,JSONPath=`.status.environment`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StyrminRestore struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StyrminRestoreSpec   `json:"spec"`
	Status StyrminRestoreStatus `json:"status,omitempty"`
}

// StyrminRestoreList is a list of StyrminRestores.
//
// +kubebuilder:object:root=true
type StyrminRestoreList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StyrminRestore `json:"items"`
}

func init() {
	SchemeBuilder.Register(&StyrminBackup{}, &StyrminBackupList{}, &StyrminRestore{}, &StyrminRestoreList{})
}
