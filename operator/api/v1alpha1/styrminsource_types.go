package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StyrminSourceSpec describes the desired-state repository an agent
// follows. The agent writes it from its flags; it is informational.
type StyrminSourceSpec struct {
	// URL of the repository.
	// +kubebuilder:validation:MinLength=1
	URL string `json:"url"`
	// Branch followed.
	// +optional
	Branch string `json:"branch,omitempty"`
	// Cluster is the cluster whose locks the agent applies.
	// +kubebuilder:validation:MinLength=1
	Cluster string `json:"cluster"`
	// Interval between polls.
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
	// SecretName is the Secret, in the agent's namespace, holding the
	// repository's credentials (keys: token, or identity and known_hosts).
	// +optional
	SecretName string `json:"secretName,omitempty"`
}

// StyrminSourceStatus is the agent's sync position, kept in the cluster
// so that a restarted agent resumes after the last commit it synced.
type StyrminSourceStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// LastSyncedCommit is the last lock commit for which every task was
	// created.
	// +optional
	LastSyncedCommit string `json:"lastSyncedCommit,omitempty"`
	// LastFetchedCommit is the branch head at the last fetch.
	// +optional
	LastFetchedCommit string `json:"lastFetchedCommit,omitempty"`
	// LastSyncTime is when the last sync ended.
	// +optional
	LastSyncTime *metav1.Time `json:"lastSyncTime,omitempty"`
	// Conditions: Ready (last sync succeeded), Stalled, HistoryRewritten
	// (the branch was rewritten; names the deployments the new history
	// locks at a sequence the cluster already used), and in lock mode
	// Locked (whether the last configuration head was locked whole).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Refused are the lockfiles of lock commits the agent did not apply
	// (oldest first; at most MaxRefusedLocks, at most four of one commit,
	// a commit's later ones dropped before older commits'): their deployments
	// keep what they run. A lock commit's status on the git host counts
	// them as failures, so a commit whose lockfile was refused is not
	// shown green.
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Refused []RefusedLock `json:"refused,omitempty"`
	// ScheduledBackups are, per environment with a backup schedule, the
	// newest time of its schedule the agent made a backup for (or first
	// saw the schedule at): a restarted agent makes a time it missed
	// however late, and never a time made before (a backup deleted by
	// hand is not made again).
	// +listType=map
	// +listMapKey=environment
	// +kubebuilder:validation:MaxItems=1024
	// +optional
	ScheduledBackups []ScheduledBackup `json:"scheduledBackups,omitempty"`
	// ReportedThrough (with commit statuses reported) is a time before
	// which every lock commit whose tasks all ended has its final commit
	// status on the git host, or was refused it for good: a replica
	// elected later asks the host about the commits that ended since and
	// posts those it shows no final status of, however long no replica
	// was elected.
	// +optional
	ReportedThrough *metav1.Time `json:"reportedThrough,omitempty"`
	// LockStatuses (in lock mode) are the commit statuses of configuration
	// heads the lock mode decided and the git host has not taken yet (it
	// did not answer, or rate limited the API), oldest first: an agent
	// restarted, or a replica elected, meanwhile posts them, where they
	// were lost with the process that decided them (a commit without its
	// lock status, or "locked again soon" for ever).
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=32
	// +optional
	LockStatuses []LockStatus `json:"lockStatuses,omitempty"`
	// LockAgain (in lock mode) is a configuration head whose last lock
	// left deployments unlocked for the machine's trouble (a sandbox that
	// could not start, a driver source not fetched), which the lock mode
	// locks again at its next round: an agent restarted, or a replica
	// elected, meanwhile too, where it skipped the head (their lock
	// commit), the deployments left waiting for the next configuration
	// commit and the head's status pending for ever.
	// +optional
	LockAgain *LockAgain `json:"lockAgain,omitempty"`
}

// LockAgain is a configuration head the lock mode locks again.
type LockAgain struct {
	// Commit is the configuration head.
	Commit string `json:"commit"`
	// Head is the branch head its last lock left: its lock commit, or the
	// configuration head when it committed nothing.
	Head string `json:"head"`
}

// LockStatus is a lock's commit status not yet posted to the git host.
type LockStatus struct {
	// Commit is the configuration commit the status is for.
	Commit string `json:"commit"`
	// State is the status's state: pending, success, failure or error.
	State string `json:"state"`
	// Description is the status's description.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Description string `json:"description,omitempty"`
}

// MaxLockStatuses is how many unposted lock statuses a StyrminSource keeps.
const MaxLockStatuses = 32

// ScheduledBackup is where an environment's backup schedule stands.
type ScheduledBackup struct {
	// Environment is the environment of the agent's cluster.
	Environment string `json:"environment"`
	// Time is the newest time of the schedule made (or when the agent
	// first saw the schedule, none made since).
	Time metav1.Time `json:"time"`
}

// MaxRefusedLocks is how many refused lockfiles a StyrminSource keeps.
const MaxRefusedLocks = 32

// RefusedLock is a lockfile of a lock commit that the agent did not apply.
type RefusedLock struct {
	// Commit is the lock commit.
	Commit string `json:"commit"`
	// Path is the lockfile's path in the repository.
	Path string `json:"path"`
	// Reason says why, as a constant (InvalidLock, LockDeleted).
	Reason string `json:"reason"`
	// Message says why, and what to change.
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
	// Sequence is the higher of the refused lockfile's sequence and the
	// one it follows (0: neither known): a change of the deployment past
	// it supersedes the refusal.
	// +optional
	Sequence int64 `json:"sequence,omitempty"`
	// Time is when the agent first refused it.
	Time metav1.Time `json:"time"`
}

// StyrminSource is the desired-state repository an agent follows, with the
// last commit it synced. One per agent, in the agent's namespace.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ssource,categories=styrmin
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`
// +kubebuilder:printcolumn:name="Branch",type=string,JSONPath=`.spec.branch`
// +kubebuilder:printcolumn:name="Cluster",type=string,JSONPath=`.spec.cluster`
// +kubebuilder:printcolumn:name="Synced",type=string,JSONPath=`.status.lastSyncedCommit`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type StyrminSource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StyrminSourceSpec   `json:"spec"`
	Status StyrminSourceStatus `json:"status,omitempty"`
}

// StyrminSourceList is a list of StyrminSources.
//
// +kubebuilder:object:root=true
type StyrminSourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []StyrminSource `json:"items"`
}

func init() {
	SchemeBuilder.Register(&StyrminSource{}, &StyrminSourceList{})
}
