package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Workflow is what a task runs, chosen by the planner from the difference
// between the active instance and the new one.
// +kubebuilder:validation:Enum=create;update;upgrade;delete;backup;restore;deleteBackup
type Workflow string

// The workflows.
const (
	WorkflowCreate  Workflow = "create"  // no active instance: hook setup
	WorkflowUpdate  Workflow = "update"  // configuration only: core step only
	WorkflowUpgrade Workflow = "upgrade" // driver or app version changed: hook upgrade
	WorkflowDelete  Workflow = "delete"  // tombstone: uninstall
	// WorkflowBackup and WorkflowRestore run an operation (spec.operation):
	// the driver's backup or restore hook against the running instance.
	WorkflowBackup  Workflow = "backup"
	WorkflowRestore Workflow = "restore"
	// WorkflowDeleteBackup runs the driver's deleteBackup hook: the
	// artefact of a StyrminBackup being deleted.
	WorkflowDeleteBackup Workflow = "deleteBackup"
)

// OperationKind is the kind of operation a task runs.
// +kubebuilder:validation:Enum=Backup;Restore;DeleteBackup
type OperationKind string

// The operation kinds.
const (
	OperationBackup  OperationKind = "Backup"
	OperationRestore OperationKind = "Restore"
	// OperationDeleteBackup deletes a backup's artefact (its
	// StyrminBackup is being deleted).
	OperationDeleteBackup OperationKind = "DeleteBackup"
)

// TaskOperation says which operation an operation task runs: the
// StyrminBackup or StyrminRestore it belongs to, and where the artefact
// is. An operation task is ordered after the deployment's tasks up to its
// toSequence and before the later ones.
type TaskOperation struct {
	// Kind is Backup or Restore.
	Kind OperationKind `json:"kind"`
	// Name is the StyrminBackup or StyrminRestore (in the agent's
	// namespace) the task belongs to.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// BackupID is the backup taken or restored.
	// +kubebuilder:validation:MinLength=1
	BackupID string `json:"backupID"`
	// Artifact is the URL of this deployment's artefact: written by a
	// backup, read by a restore.
	// +kubebuilder:validation:MinLength=1
	Artifact string `json:"artifact"`
	// Secret names the Secret in the agent's namespace holding the
	// location's credentials ("" for none). The agent copies it next to
	// the driver's job; its values are never in a status, event or log.
	// +optional
	Secret string `json:"secret,omitempty"`
	// Attempt counts a restore's runs (1 first, then one more per retry).
	// +optional
	Attempt int32 `json:"attempt,omitempty"`
	// Created is when the StyrminBackup or StyrminRestore was made. A
	// deployment's operations at one sequence run in this order (then by
	// kind, name and attempt), which is the same for every deployment an
	// operation names: ordered by when each task was made, two restores
	// could end in one order on one deployment and the other on the next
	// (a task made late after a refused create).
	// +optional
	Created *metav1.Time `json:"created,omitempty"`
}

// TaskPhase is where a task is in its life. Succeeded, Failed and
// Superseded are terminal.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Superseded
type TaskPhase string

// The task phases.
const (
	TaskPending    TaskPhase = "Pending"
	TaskRunning    TaskPhase = "Running"
	TaskSucceeded  TaskPhase = "Succeeded"
	TaskFailed     TaskPhase = "Failed"
	TaskSuperseded TaskPhase = "Superseded"
)

// Terminal reports whether the phase is final.
func (p TaskPhase) Terminal() bool {
	return p == TaskSucceeded || p == TaskFailed || p == TaskSuperseded
}

// Withdrawn reports whether the task ended before it ran because the
// branch no longer held its lock commit (Superseded, reason
// ReasonTaskWithdrawn): nothing of its change was applied, and no newer
// instance took it on.
func (t *StyrminTask) Withdrawn() bool {
	if t.Status.Phase != TaskSuperseded {
		return false
	}
	for _, c := range t.Status.Conditions {
		if c.Type == ConditionReady {
			return c.Reason == ReasonTaskWithdrawn
		}
	}
	return false
}

// StepState is where one step of a task is.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Skipped
type StepState string

// The step states. Succeeded, Failed and Skipped are terminal.
const (
	StepPending   StepState = "Pending"
	StepRunning   StepState = "Running"
	StepSucceeded StepState = "Succeeded"
	StepFailed    StepState = "Failed"
	StepSkipped   StepState = "Skipped"
)

// Terminal reports whether the state is final.
func (s StepState) Terminal() bool {
	return s == StepSucceeded || s == StepFailed || s == StepSkipped
}

// LockRef points at a lockfile in the desired-state repository.
type LockRef struct {
	// Commit that wrote the lockfile at this sequence.
	// +kubebuilder:validation:MinLength=1
	Commit string `json:"commit"`
	// Path of the lockfile in the repository
	// ("locks/<cluster>/<env>/<name>.lock.yaml").
	// +kubebuilder:validation:MinLength=1
	Path string `json:"path"`
}

// StyrminTaskSpec says which workflow to run for which sequence of which
// deployment. It does not change once the task is created.
type StyrminTaskSpec struct {
	// Deployment is the deployment's cluster/environment/name.
	Deployment DeploymentID `json:"deployment"`
	// Namespace is the deployment's namespace, where its
	// StyrminDeployment lives.
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// Workflow is the workflow the lock's history suggests (from the
	// previous lockfile). The task chooses the workflow it runs when it
	// starts, against the active instance (status.workflow).
	Workflow Workflow `json:"workflow"`
	// FromSequence is the previous lock's sequence (0 when the deployment
	// had none); status.fromSequence is the active one the task starts
	// from.
	// +kubebuilder:validation:Minimum=0
	// +optional
	FromSequence int64 `json:"fromSequence,omitempty"`
	// ToSequence is the sequence the task applies.
	// +kubebuilder:validation:Minimum=1
	ToSequence int64 `json:"toSequence"`
	// Lock is where the target instance is recorded in git.
	Lock LockRef `json:"lock"`
	// Target summarises the instance the task applies, for people and
	// `styrminctl history`; the instance itself is at Lock.
	// +optional
	Target *TaskTarget `json:"target,omitempty"`
	// Operation is set on an operation task (a backup or a restore), which
	// runs against the deployment's running instance rather than a lock.
	// +optional
	Operation *TaskOperation `json:"operation,omitempty"`
	// Instance is a copy of the target instance. When absent (the agent's
	// sync leaves it out: each write of the task then costs the API server
	// much less), the agent reads it from Lock.
	// +optional
	Instance *StyrminDeploymentSpec `json:"instance,omitempty"`
}

// TaskTarget summarises the instance a task applies.
type TaskTarget struct {
	// Kind is Instance, or Tombstone for a deletion.
	// +optional
	Kind string `json:"kind,omitempty"`
	// Driver is the driver version the instance runs.
	// +optional
	Driver DriverRef `json:"driver,omitempty"`
	// AppVersion is the application version.
	// +optional
	AppVersion string `json:"appVersion,omitempty"`
	// SourceCommit is the configuration commit the instance was resolved
	// from.
	// +optional
	SourceCommit string `json:"sourceCommit,omitempty"`
	// Digest is the instance's digest.
	// +optional
	Digest string `json:"digest,omitempty"`
}

// StyrminTaskStatus is the progress of a task. Each step's state is
// written before and after the step runs, so an agent that restarts
// resumes at the step that was running.
type StyrminTaskStatus struct {
	// Phase of the task.
	// +optional
	Phase TaskPhase `json:"phase,omitempty"`
	// Workflow is the workflow the task runs, chosen against the active
	// instance when the task starts: create when there is none, upgrade
	// when the driver or the application version differs from it, update
	// otherwise; delete for a tombstone.
	// +optional
	Workflow Workflow `json:"workflow,omitempty"`
	// FromSequence is the active instance's sequence when the task
	// started (0: none).
	// +optional
	FromSequence int64 `json:"fromSequence,omitempty"`
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Steps are the task's steps in the order they run: the driver's
	// actions for the workflow's hook, pre → core → post.
	// +listType=atomic
	// +optional
	Steps []TaskStep `json:"steps,omitempty"`
	// CurrentStep is the index in Steps of the step running or next to
	// run (len(Steps) when all ran).
	// +optional
	CurrentStep int32 `json:"currentStep,omitempty"`
	// StartedAt is when the first step started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the task reached a terminal phase.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Message says why the task failed or was superseded, naming the step.
	// +optional
	Message string `json:"message,omitempty"`
	// SupersededBy is the sequence that made the task superseded.
	// +optional
	SupersededBy int64 `json:"supersededBy,omitempty"`
	// Conditions of the task, for generic tools.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// TaskStep is one step of a task: one action the driver declared for a
// hook and mode.
type TaskStep struct {
	// Name identifies the step in the task ("upgrade/pre/1:stopComponents").
	Name string `json:"name"`
	// Hook is setup or upgrade ("" for workflows without a hook: update,
	// delete).
	// +optional
	Hook string `json:"hook,omitempty"`
	// Mode is pre, core or post.
	// +kubebuilder:validation:Enum=pre;core;post
	Mode string `json:"mode"`
	// Action is the primitive the step runs (stopComponents, runJob, …).
	Action string `json:"action"`
	// Components the step acts on.
	// +listType=atomic
	// +optional
	Components []string `json:"components,omitempty"`
	// Args are the step's arguments as declared (command, job name, …).
	// +optional
	Args map[string]string `json:"args,omitempty"`
	// Timeout of the step.
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// State of the step.
	State StepState `json:"state"`
	// Attempts counts how often the step was started (more than one after
	// an agent restart while it ran).
	// +optional
	Attempts int32 `json:"attempts,omitempty"`
	// Resumes counts the runs of the step an agent restart interrupted
	// (each resumed by the next agent). Past the agent's bound the step
	// fails (StepInterrupted) rather than start again: an agent that
	// restarts more often than the step's timeout would otherwise keep
	// the step Running for ever.
	// +optional
	Resumes int32 `json:"resumes,omitempty"`
	// Output of the step (a command's or job's output, or what the core
	// step did), truncated to its last 4 KiB.
	// +optional
	Output string `json:"output,omitempty"`
	// Message says why the step failed or was skipped.
	// +optional
	Message string `json:"message,omitempty"`
	// StartedAt is when the step last started.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when the step ended.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Recorded holds what a step must remember for a later one, e.g. the
	// replicas stopComponents scaled down from ("Deployment/worker": "3").
	// +optional
	Recorded map[string]string `json:"recorded,omitempty"`
}

// StyrminTask is one run of a workflow for one sequence of one
// deployment. The agent creates one per new (deployment, sequence) found
// in git and runs its steps in order; it ends Succeeded, Failed or
// Superseded.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=stask,categories=styrmin
// +kubebuilder:printcolumn:name="Environment",type=string,JSONPath=`.spec.deployment.environment`
// +kubebuilder:printcolumn:name="Deployment",type=string,JSONPath=`.spec.deployment.name`
// +kubebuilder:printcolumn:name="Workflow",type=string,JSONPath=`.status.workflow`
// +kubebuilder:printcolumn:name="From",type=integer,JSONPath=`.status.fromSequence`
// +kubebuilder:printcolumn:name="To",type=integer,JSONPath=`.spec.toSequence`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Step",type=integer,JSONPath=`.status.currentStep`,priority=1
// +kubebuilder:printcolumn:name="Message",type=string,JSONPath=`.status.message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StyrminTask struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StyrminTaskSpec   `json:"spec"`
	Status StyrminTaskStatus `json:"status,omitempty"`
}

// StyrminTaskList is a list of StyrminTasks.
//
// +kubebuilder:object:root=true
type StyrminTaskList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StyrminTask `json:"items"`
}

func init() {
	SchemeBuilder.Register(&StyrminTask{}, &StyrminTaskList{})
}
