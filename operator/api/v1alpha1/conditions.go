package v1alpha1

// Condition types of a StyrminDeployment. Reconciling and Stalled follow
// the kstatus convention, so generic tools read them as well.
const (
	// ConditionReady is True when the instance in the spec is applied and
	// every component is ready.
	ConditionReady = "Ready"
	// ConditionReconciling is True while the agent is changing the cluster
	// or waiting for it to converge.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when the agent cannot make progress without
	// a change in git (missing driver, render error, invalid instance).
	ConditionStalled = "Stalled"
	// ConditionDrifted is True when the live objects differ from the
	// release's manifest in fields Styrmin owns and are not yet put back.
	ConditionDrifted = "Drifted"
)

// Condition reasons of a StyrminDeployment.
const (
	// ReasonSucceeded: the release is applied and all components are ready.
	ReasonSucceeded = "Succeeded"
	// ReasonProgressing: the release is being installed or upgraded.
	ReasonProgressing = "Progressing"
	// ReasonComponentsNotReady: applied, some workloads are not ready yet.
	ReasonComponentsNotReady = "ComponentsNotReady"
	// ReasonWorkloadFailed: applied, and a workload cannot become ready
	// without a change (a rollout past its progress deadline).
	ReasonWorkloadFailed = "WorkloadFailed"
	// ReasonComponentsHeldStopped: a failed task stopped components (an
	// upgrade before its migration, a restore before its job) and no task
	// started them since. At zero replicas they would read as ready; they
	// stay stopped, the drift check leaves them, until a retry, a fix or a
	// restore's retry runs.
	ReasonComponentsHeldStopped = "ComponentsHeldStopped"
	// ReasonApplyFailed: installing or upgrading the release failed; the
	// agent retries.
	ReasonApplyFailed = "ApplyFailed"
	// ReasonHealthCheckFailed: the live objects could not be read.
	ReasonHealthCheckFailed = "HealthCheckFailed"
	// ReasonDriverUnavailable: the driver source could not be read right
	// now (network, git); the agent retries.
	ReasonDriverUnavailable = "DriverUnavailable"
	// ReasonDriverNotFound: the pinned driver version does not exist or its
	// digest differs (stalled until git changes).
	ReasonDriverNotFound = "DriverNotFound"
	// ReasonDriverLimitExceeded: the driver exceeded a limit on its load
	// or render (time, memory, rendered or unpacked bytes); it needs a
	// change in git.
	ReasonDriverLimitExceeded = "DriverLimitExceeded"
	// ReasonRenderFailed: the driver could not render the instance
	// (stalled until git changes).
	ReasonRenderFailed = "RenderFailed"
	// ReasonInvalidSpec: the spec is not a valid instance (stalled).
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonNoDrift: the last drift check found nothing to correct.
	ReasonNoDrift = "NoDrift"
	// ReasonDriftDetected: drift was found and is being corrected.
	ReasonDriftDetected = "DriftDetected"
	// ReasonDriftCorrected: drift was found and put back. Also the reason
	// of the event recorded for each correction.
	ReasonDriftCorrected = "DriftCorrected"
	// ReasonDriftCorrectionFailed: drift was found and the API server
	// refused to put some objects back (the message names each and why;
	// the others were put back); the agent retries sooner than the drift
	// interval. Ready is left to the workloads' health.
	ReasonDriftCorrectionFailed = "DriftCorrectionFailed"
	// ReasonDriftCheckPaused: a task of the deployment is running; its
	// steps change workloads on purpose (workers stopped for a migration),
	// so drift is not corrected until it ends. Or a failed task left
	// components stopped (ReasonComponentsHeldStopped).
	ReasonDriftCheckPaused = "DriftCheckPaused"
	// ReasonDriftCheckFailed: the live objects could not be compared with
	// the release (Drifted Unknown); it says nothing of their health.
	ReasonDriftCheckFailed = "DriftCheckFailed"
	// ReasonDeleting: a tombstone or deletion is uninstalling the release.
	ReasonDeleting = "Deleting"
	// ReasonForbidden: the API server refused the apply for the identity
	// it was made as (the environment's service account, or the agent):
	// retried, as the cluster's RBAC may be fixed.
	ReasonForbidden = "Forbidden"
	// ReasonQuotaExceeded: a ResourceQuota of the namespace refused an
	// object of the release (retried: the quota may be raised).
	ReasonQuotaExceeded = "QuotaExceeded"
	// ReasonAdmissionDenied: an admission policy of the cluster (a
	// validating webhook, a ValidatingAdmissionPolicy) refused an object
	// of the release: stalled, as the same objects are refused again
	// until git or the policy changes (looked at again on the interval).
	ReasonAdmissionDenied = "AdmissionDenied"
	// ReasonNamespaceTerminating: the deployment's namespace is being
	// deleted, and takes no new objects.
	ReasonNamespaceTerminating = "NamespaceTerminating"
	// ReasonApplyConflict: an object the release did not create exists
	// and another field manager owns fields of it, or another release's
	// annotations are on it; it is not taken over. Stalled (looked at
	// again on the drift interval), but retried while the other
	// release's deployment is being deleted.
	ReasonApplyConflict = "ApplyConflict"
	// ReasonHostClaimed: the release's Ingress claims a host, on its
	// ingress class, that an Ingress of another StyrminDeployment already
	// holds; it is not applied, so it takes none of the other's traffic.
	ReasonHostClaimed = "HostClaimed"
	// ReasonUninstallFailed: uninstalling the release failed; retried.
	ReasonUninstallFailed = "UninstallFailed"
)

// AgentEventSource is the reporting controller of the agent's events
// (its ReportingController; Source.Component in an event written by the
// older API). Their notes hold no sensitive value: the agent masks what
// it writes; any other writer's may (health.EventMessage).
const AgentEventSource = "styrmin-agent"

// Event reasons recorded on StyrminDeployments and StyrminTasks, besides
// the condition reasons above.
const (
	// EventInstalled, EventUpgraded and EventUninstalled record release
	// changes.
	EventInstalled   = "Installed"
	EventUpgraded    = "Upgraded"
	EventUninstalled = "Uninstalled"
	// EventUninstalledAsAgent: the namespace of a deployment that applies
	// as a service account is being deleted, and with it the rights to
	// act as that account; the agent uninstalled the release itself.
	EventUninstalledAsAgent = "UninstalledAsAgent"
	// EventReleaseRecordMissing: the Helm record of the running revision
	// is gone (`helm uninstall`, a deleted Secret); the release is
	// written again as a new revision.
	EventReleaseRecordMissing = "ReleaseRecordMissing"
	// EventReleaseRecordChanged: the Helm record of the running revision
	// holds another manifest than the agent wrote; the release is written
	// again from the lock, trusting nothing of that record.
	EventReleaseRecordChanged = "ReleaseRecordChanged"
	// EventNewerInstanceKept: a task found a StyrminDeployment holding a
	// higher sequence and left it unchanged.
	EventNewerInstanceKept = "NewerInstanceKept"
)

// Condition and event reasons of a StyrminTask.
const (
	// ReasonTaskPending: the task is planned and waits for its turn.
	ReasonTaskPending = "Pending"
	// ReasonWaitingForOrder: the task's instance runs after others (its
	// lock's after: ID@SEQ) that have not run, or are not Ready, yet.
	ReasonWaitingForOrder = "WaitingForOrder"
	// ReasonDeletionInProgress: the deployment is added back while the
	// uninstall of its deletion (whose task failed) has not ended; its
	// change waits for it, then installs it anew.
	ReasonDeletionInProgress = "DeletionInProgress"
	// ReasonRestoreInProgress: the task's change waits for a restore of
	// its deployment (running, or failed and not yet retried or deleted).
	ReasonRestoreInProgress = "RestoreInProgress"
	// ReasonTaskRunning: a step of the task is running.
	ReasonTaskRunning = "Running"
	// ReasonTaskFailed: a step failed, or the task could not run.
	ReasonTaskFailed = "Failed"
	// ReasonTaskSuperseded: a newer instance of the deployment made the
	// task unnecessary.
	ReasonTaskSuperseded = "Superseded"
	// ReasonSupersededByDeletion: a change locked after the task deletes
	// the deployment (its tombstone ran, or a pending create meets it):
	// the task ends Superseded before it ran, nothing of it applied, and
	// no newer instance carries its change.
	ReasonSupersededByDeletion = "SupersededByDeletion"
	// ReasonTaskWithdrawn: the branch no longer holds the task's lock
	// commit (a force push or a rewind took it away) and the task had not
	// started; it ends Superseded, nothing applied.
	ReasonTaskWithdrawn = "Withdrawn"
	// ReasonInvalidTask: the task's instance, lock or steps cannot be had
	// or do not match the task.
	ReasonInvalidTask = "InvalidTask"
	// ReasonLockMismatch: the task does not match its lock in git (its
	// namespace, deployment or carried instance differ from what the lock
	// commit records): a hand-made task, refused before it does anything.
	ReasonLockMismatch = "LockMismatch"
	// ReasonPolicyViolation: the instance's rendered objects leave its
	// environment's policy (namespaces, kinds).
	ReasonPolicyViolation = "PolicyViolation"
	// ReasonStepFailed: a step's action failed in a way no retry fixes.
	ReasonStepFailed = "StepFailed"
	// ReasonStepTimedOut: a step did not finish within its timeout.
	ReasonStepTimedOut = "StepTimedOut"
	// ReasonStepInterrupted: agent restarts interrupted a step more often
	// than the agent resumes one.
	ReasonStepInterrupted = "StepInterrupted"
)

// Condition and event reasons of a StyrminSource.
const (
	// ReasonSynced: the branch head was synced.
	ReasonSynced = "Synced"
	// ReasonFetchFailed: the repository could not be fetched; retried.
	ReasonFetchFailed = "FetchFailed"
	// ReasonAuthenticationFailed: the remote refused the credentials.
	ReasonAuthenticationFailed = "AuthenticationFailed"
	// ReasonSyncFailed: walking the lock commits failed; retried.
	ReasonSyncFailed = "SyncFailed"
	// ReasonInvalidLock: a lockfile does not decode, names another
	// deployment or does not follow the sequence; no task was made.
	ReasonInvalidLock = "InvalidLock"
	// ReasonLockDeleted: a lockfile was deleted by hand; nothing changed.
	ReasonLockDeleted = "LockDeleted"
	// ReasonInvalidLockTrailer: a Styrmin-Lock trailer of a lock commit
	// does not parse; it was skipped and the sync went on (trailers are
	// hints, the lockfiles are what counts).
	ReasonInvalidLockTrailer = "InvalidLockTrailer"
	// ReasonHistoryRewritten: the branch head does not descend from the
	// last synced commit (a force push or a rewind). Also the reason of
	// the HistoryRewritten condition while it is True.
	ReasonHistoryRewritten = "HistoryRewritten"
	// ReasonSequenceUsed: after a rewrite, the branch locks a deployment
	// at a sequence the cluster already ran with other content (or below
	// it). The lock is ignored, since a sequence is never reused; the next
	// lock of the deployment numbers after the cluster's.
	ReasonSequenceUsed = "SequenceUsed"
)

// ConditionLocked is a StyrminSource condition of the agent's lock mode
// only, written after each lock of a new configuration head: True
// (ReasonLocked) when every deployment of the head is locked, False when
// some were held back (ReasonDeploymentsHeldBack: the message names each
// and why, a driver folder that does not load, a parameter the driver
// refuses) or nothing was (ReasonLockFailed), Unknown when the head's
// configuration was locked by a lock commit the lock mode did not make
// (ReasonLockedElsewhere). Ready stays the sync's: a source can be synced
// while its last configuration commit is not locked.
const ConditionLocked = "Locked"

// Reasons of the Locked condition.
const (
	// ReasonLocked: every deployment of the head is locked.
	ReasonLocked = "Locked"
	// ReasonDeploymentsHeldBack: some deployments of the head are not
	// locked (they keep what they run); the others are.
	ReasonDeploymentsHeldBack = "DeploymentsHeldBack"
	// ReasonLockFailed: nothing of the head is locked.
	ReasonLockFailed = "LockFailed"
	// ReasonLockedElsewhere: the head is a lock commit the lock mode did
	// not make (styrminctl lock --push, CI, another cluster's agent),
	// over configuration it never locked: what that lock held back is in
	// its own output, and what the lock mode said of an older head no
	// longer stands.
	ReasonLockedElsewhere = "LockedElsewhere"
)

// ConditionHistoryRewritten is a StyrminSource condition, set True by the
// sync that finds the branch rewritten. Its reason is ReasonSequenceUsed
// while the branch locks a deployment at a sequence the cluster already
// used (the message names each such deployment and the lowest sequence
// its next lock may have), else ReasonHistoryRewritten. The first sync of
// a forward move that finds no such deployment removes it.
const ConditionHistoryRewritten = "HistoryRewritten"

// ReasonSequenceAhead: the StyrminDeployment's styrmin.io/instance-sequence
// annotation holds a number above the instance it holds, which no task
// wrote (a hand edit): the deployment is Stalled and its newest task
// waits until the annotation is removed.
const ReasonSequenceAhead = "SequenceAhead"

// Reasons of the Reconciling condition of a StyrminBackup being deleted,
// which says what its deletion waits for.
const (
	// ReasonDeletionWaitsForRestore: a restore reads the backup (it runs,
	// or failed and was asked to retry); its artefacts stay until it ends.
	ReasonDeletionWaitsForRestore = "DeletionWaitsForRestore"
	// ReasonDeletingArtifacts: the deployments' deleteBackup hooks run as
	// tasks; the backup goes when they have ended.
	ReasonDeletingArtifacts = "DeletingArtifacts"
	// ReasonDeletionWaitsForClone: an environment git declares cloned
	// from the backup has deployments whose creates restore it and have
	// not ended (or not been made yet); its artefacts stay until they have.
	ReasonDeletionWaitsForClone = "DeletionWaitsForClone"
	// ReasonDeletionWaitsForBackupTasks: the backup's own tasks run; the
	// artefacts they write are deleted once they end.
	ReasonDeletionWaitsForBackupTasks = "DeletionWaitsForBackupTasks"
	// ReasonDeletionWaitsForDriver: the driver a deployment runs, whose
	// deleteBackup hook deletes its artefact, cannot be loaded (its
	// commit gone from the remote, a fetch failing); the message names
	// the deployment and why. The others' artefacts are deleted
	// meanwhile.
	ReasonDeletionWaitsForDriver = "DeletionWaitsForDriver"
)
