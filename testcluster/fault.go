package testcluster

// FaultAnnotation is the pod annotation that makes kwok play a failure
// instead of its default lifecycle on a fake node (set it in a pod template
// to fault every pod of a Job or Deployment). Its values are FaultFail,
// FaultCrashLoop and FaultUnready; any other value, or none, leaves the pod
// to kwok's defaults (Running and Ready; a Job's pod Succeeded). A faulty pod
// is deleted like any other. The stages are hack/testcluster/fault-stages.yaml.
const FaultAnnotation = "kwok.styrmin.io/fault"

// Values of FaultAnnotation.
const (
	// FaultFail makes a pod, once Running, end Failed: every container
	// terminated with exit code 1, reason Error and message FaultMessage.
	// With backoffLimit 0 the Job controller then fails the pod's Job
	// (condition Failed, reason BackoffLimitExceeded); with retries, every
	// retry fails too. It applies to pods of any owner: a ReplicaSet or
	// StatefulSet replaces a Failed pod and the replacement fails again, so
	// for a Deployment use FaultCrashLoop.
	FaultFail = "fail"
	// FaultCrashLoop keeps a pod Running and never Ready: every container
	// waiting with reason CrashLoopBackOff and message CrashLoopMessage,
	// restartCount CrashLoopRestarts, last terminated with exit code 1; pod
	// conditions Ready and ContainersReady False (reason ContainersNotReady).
	// A Job's pod stays so too (it neither Succeeds nor Fails).
	FaultCrashLoop = "crashloop"
	// FaultUnready keeps a pod Running with every container running
	// (started) but not ready, and pod conditions Ready and ContainersReady
	// False: a rollout that never becomes available, so the deployment
	// controller sets Progressing False, reason ProgressDeadlineExceeded,
	// once the Deployment's progressDeadlineSeconds have passed. A Job's
	// pod stays Running too.
	FaultUnready = "unready"
)

// What the fault stages write into container statuses.
const (
	// FaultMessage is the terminated message of a FaultFail container
	// (and the last terminated message of a FaultCrashLoop one).
	FaultMessage = "injected fault"
	// CrashLoopMessage is the waiting message of a FaultCrashLoop container.
	CrashLoopMessage = "back-off 10s restarting failed container"
	// CrashLoopRestarts is the restartCount of a FaultCrashLoop container.
	CrashLoopRestarts = 3
)
