package health

import (
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

func ptr32(i int32) *int32 { return &i }

func TestDeploymentReadiness(t *testing.T) {
	for _, tc := range []struct {
		name   string
		gen    int64
		spec   *int32
		status appsv1.DeploymentStatus
		ready  bool
	}{
		{"all ready", 2, ptr32(3), appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3}, true},
		{"new generation not observed", 3, ptr32(3), appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 3, AvailableReplicas: 3}, false},
		{"rolling: old replicas left", 2, ptr32(3), appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 4, UpdatedReplicas: 3, ReadyReplicas: 4, AvailableReplicas: 4}, false},
		{"not all updated", 2, ptr32(3), appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 2, ReadyReplicas: 3, AvailableReplicas: 3}, false},
		{"one not ready", 2, ptr32(3), appsv1.DeploymentStatus{ObservedGeneration: 2, Replicas: 3, UpdatedReplicas: 3, ReadyReplicas: 2, AvailableReplicas: 2}, false},
		{"scaled to zero", 2, ptr32(0), appsv1.DeploymentStatus{ObservedGeneration: 2}, true},
		{"replicas unset means one", 1, nil, appsv1.DeploymentStatus{ObservedGeneration: 1}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Generation: tc.gen}, Spec: appsv1.DeploymentSpec{Replicas: tc.spec}, Status: tc.status}
			var ws v1alpha1.WorkloadStatus
			deploymentReady(d, &ws)
			if ws.Ready != tc.ready {
				t.Fatalf("ready = %v (%s), want %v", ws.Ready, ws.Message, tc.ready)
			}
			if !ws.Ready && ws.Message == "" {
				t.Fatal("not ready without a message")
			}
		})
	}
}

func TestStatefulSetAndDaemonSetReadiness(t *testing.T) {
	s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Spec: appsv1.StatefulSetSpec{Replicas: ptr32(2)},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 1, ReadyReplicas: 2, UpdatedReplicas: 1, CurrentRevision: "a", UpdateRevision: "b"}}
	var ws v1alpha1.WorkloadStatus
	statefulSetReady(s, &ws)
	if ws.Ready {
		t.Fatal("a StatefulSet mid-rollout is ready")
	}
	s.Status.UpdatedReplicas, s.Status.CurrentRevision = 2, "b"
	ws = v1alpha1.WorkloadStatus{}
	statefulSetReady(s, &ws)
	if !ws.Ready || ws.ReadyReplicas != 2 || ws.DesiredReplicas != 2 {
		t.Fatalf("rolled-out StatefulSet: %+v", ws)
	}
	d := &appsv1.DaemonSet{Status: appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, NumberReady: 1, UpdatedNumberScheduled: 2}}
	ws = v1alpha1.WorkloadStatus{}
	daemonSetReady(d, &ws)
	if ws.Ready {
		t.Fatal("a DaemonSet with a pod not ready is ready")
	}
}

// TestAPartitionedStatefulSetIsReadyOnceThePodsAbovePartitionAreUpdated:
// with a rolling-update partition the StatefulSet controller updates only
// the pods at or above it, so the current revision never reaches the
// update revision; ready as `kubectl rollout status` says, or a change
// that uses a partition (a canary) would never end.
func TestAPartitionedStatefulSetIsReadyOnceThePodsAbovePartitionAreUpdated(t *testing.T) {
	partitioned := func(partition int32, updated int32) *appsv1.StatefulSet {
		return &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 2},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr32(3), UpdateStrategy: appsv1.StatefulSetUpdateStrategy{
				Type: appsv1.RollingUpdateStatefulSetStrategyType, RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr32(partition)}}},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: updated, CurrentRevision: "a", UpdateRevision: "b"}}
	}
	for _, c := range []struct {
		name               string
		partition, updated int32
		ready              bool
	}{
		{"partition 1, the two above it updated", 1, 2, true},
		{"partition 1, one of the two above it updated", 1, 1, false},
		{"partition 3: nothing to update", 3, 0, true},
		{"partition above the replicas", 5, 0, true},
		{"partition 0, two of three updated", 0, 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ws v1alpha1.WorkloadStatus
			statefulSetReady(partitioned(c.partition, c.updated), &ws)
			if ws.Ready != c.ready {
				t.Fatalf("ready %v, want %v (%s)", ws.Ready, c.ready, ws.Message)
			}
			if !ws.Ready && ws.Message == "" {
				t.Fatal("not ready without a message")
			}
		})
	}
}

// TestAProgressDeadlineExceededBeforeTheApplyIsNoVerdictOnIt: the
// deployment controller keeps a timeout until the next rollout makes
// progress, so a timeout from before the apply is not a failure of what
// was applied; one at or after it is.
func TestAProgressDeadlineExceededBeforeTheApplyIsNoVerdictOnIt(t *testing.T) {
	applied := time.Date(2026, 12, 1, 18, 0, 10, 500_000_000, time.UTC)
	timedOut := func(at time.Time) *appsv1.Deployment {
		return &appsv1.Deployment{Status: appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded",
			LastUpdateTime: metav1.NewTime(at),
		}}}}
	}
	for _, tc := range []struct {
		name      string
		d         *appsv1.Deployment
		appliedAt time.Time
		stale     bool
	}{
		{"timed out seconds before the apply", timedOut(applied.Add(-5 * time.Second)), applied, true},
		{"timed out in the second of the apply", timedOut(applied.Truncate(time.Second)), applied, false},
		{"timed out after the apply", timedOut(applied.Add(2 * time.Second)), applied, false},
		{"no apply time known", timedOut(applied.Add(-5 * time.Second)), time.Time{}, false},
		{"progressing", &appsv1.Deployment{}, applied, false},
	} {
		if got := timedOutBefore(tc.d, tc.appliedAt); got != tc.stale {
			t.Errorf("%s: timedOutBefore = %v, want %v", tc.name, got, tc.stale)
		}
	}
}

// TestATerminationMessageTakenFromLogsIsNotShown: with
// terminationMessagePolicy FallbackToLogsOnError a crashed container's
// termination message is the end of its log, which may hold any value it
// was given (a database password in a connection string); the status,
// read by more people than the logs, showed it. A message the program
// wrote to its termination file stays.
func TestATerminationMessageTakenFromLogsIsNotShown(t *testing.T) {
	pod := func(policy corev1.TerminationMessagePolicy) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web-1"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", TerminationMessagePolicy: policy}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "web", RestartCount: 3,
				State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 1,
					Message: "dial postgres://app:s3cret-in-the-log@db: refused"}}}}},
		}
	}
	if ps := PodSummary(pod(corev1.TerminationMessageFallbackToLogsOnError), nil); strings.Contains(ps.Message, "s3cret") || ps.Message != "exit code 1" || ps.Reason != "Error" {
		t.Errorf("from the logs: %+v, want the reason and exit code only", ps)
	}
	if ps := PodSummary(pod(corev1.TerminationMessageReadFile), nil); !strings.Contains(ps.Message, "refused") {
		t.Errorf("from the termination file: %+v, want the message kept", ps)
	}
}

// TestATerminationMessageTheProgramWroteIsMaskedOrWithheld: a message
// written to the termination file may hold a value the program was given
// too: it is shown masked with the deployment's sensitive values, and
// withheld when they cannot be read; they are read only for such a
// message.
func TestATerminationMessageTheProgramWroteIsMaskedOrWithheld(t *testing.T) {
	const value = "launch-code-4711"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "migrate-1"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "migrate", TerminationMessagePolicy: corev1.TerminationMessageReadFile}}},
		Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: []corev1.ContainerStatus{{Name: "migrate",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 2, Message: "bad key " + value}}}}},
	}
	reads := 0
	values := func(s resolver.Sensitive, err error) SensitiveValues {
		return func() (resolver.Sensitive, error) { reads++; return s, err }
	}
	if ps := PodSummary(pod, values(resolver.Sensitive{"p": value}, nil)); ps.Message != "exit code 2: bad key "+resolver.Masked {
		t.Errorf("with the values: %q, want the message masked", ps.Message)
	}
	if ps := PodSummary(pod, values(nil, errors.New("secrets is forbidden"))); strings.Contains(ps.Message, value) || !strings.Contains(ps.Message, "withheld") || !strings.Contains(ps.Message, "forbidden") {
		t.Errorf("without the values: %q, want the message withheld, saying why", ps.Message)
	}
	pod.Status.ContainerStatuses[0].State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	reads = 0
	PodSummary(pod, values(nil, nil))
	if reads != 0 {
		t.Errorf("the values were read %d times for a pod with no message its program wrote", reads)
	}
}

// TestAPodsMessageInTheStatusIsBounded: a container's termination message
// may be 4 KiB, and the status lists up to five pods of every workload not
// ready: a release of hundreds of crashing workloads made a status past
// what the API server takes, and its write was refused for ever. A pod's
// message is cut, the cut marked.
func TestAPodsMessageInTheStatusIsBounded(t *testing.T) {
	long := strings.Repeat("panic: the configuration is wrong; ", 4096/35)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-1"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", TerminationMessagePolicy: corev1.TerminationMessageReadFile}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: []corev1.ContainerStatus{{Name: "web",
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 2, Message: long}}}}},
	}
	ps := PodSummary(pod, nil)
	if len(ps.Message) > maxPodMessage || !strings.HasPrefix(ps.Message, "exit code 2: panic") || !strings.HasSuffix(ps.Message, "…") {
		t.Fatalf("a pod's message of %d bytes (at most %d, cut): %.60q…", len(ps.Message), maxPodMessage, ps.Message)
	}
}

// TestAPodBeingDeletedIsShownTerminating pins the phase a pod being
// deleted shows: one whose node is gone stays Running in its status for
// as long as no one deletes it for good, and a StatefulSet waits for it;
// shown Running, the status read as if it served.
func TestAPodBeingDeletedIsShownTerminating(t *testing.T) {
	deleted := metav1.Now()
	for _, tc := range []struct {
		phase corev1.PodPhase
		want  string
	}{{corev1.PodRunning, "Terminating"}, {corev1.PodPending, "Terminating"}, {corev1.PodFailed, "Failed"}, {corev1.PodSucceeded, "Succeeded"}} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "db-0", DeletionTimestamp: &deleted}, Status: corev1.PodStatus{Phase: tc.phase}}
		if got := PodSummary(pod, nil).Phase; got != tc.want {
			t.Errorf("a pod being deleted in phase %s shows %q; want %q", tc.phase, got, tc.want)
		}
	}
	if got := PodSummary(&corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodRunning}}, nil).Phase; got != "Running" {
		t.Errorf("a pod not being deleted shows %q; want Running", got)
	}
}

// TestAnEventMessageNotTheAgentsIsMaskedOrWithheld: the kubelet quotes a
// failed probe's or hook's output in its events, and a program may print
// a value it was given: a message any writer but the agent wrote is
// masked with the deployment's sensitive values, withheld when they
// cannot be read; the agent's own (it masks what it writes) are kept,
// and the values are not read for them.
func TestAnEventMessageNotTheAgentsIsMaskedOrWithheld(t *testing.T) {
	const value = "launch-code-4711"
	reads := 0
	values := func(s resolver.Sensitive, err error) SensitiveValues {
		return func() (resolver.Sensitive, error) { reads++; return s, err }
	}
	kubelet := &corev1.Event{Reason: "Unhealthy", Source: corev1.EventSource{Component: "kubelet"},
		Message: "Readiness probe failed: psql: postgres://app:" + value + "@db/app: refused"}
	if got := EventMessage(kubelet, values(resolver.Sensitive{"p": value}, nil)); got != "Readiness probe failed: psql: postgres://app:"+resolver.Masked+"@db/app: refused" {
		t.Errorf("with the values: %q, want the message masked", got)
	}
	if got := EventMessage(kubelet, values(nil, errors.New("secrets is forbidden"))); strings.Contains(got, value) || !strings.Contains(got, "bytes of event message withheld") || !strings.Contains(got, "forbidden") {
		t.Errorf("without the values: %q, want the message withheld, saying why", got)
	}
	reads = 0
	for _, agent := range []*corev1.Event{
		{ReportingController: v1alpha1.AgentEventSource, Message: "step migrate failed (StepFailed); its message and output are in the task's status"},
		{Source: corev1.EventSource{Component: v1alpha1.AgentEventSource}, Message: "kept sequence 3"},
	} {
		if got := EventMessage(agent, values(nil, errors.New("secrets is forbidden"))); got != agent.Message {
			t.Errorf("the agent's event: %q, want %q as written", got, agent.Message)
		}
	}
	// Only the events API's reporting controller says who wrote one that
	// names it.
	forged := &corev1.Event{ReportingController: "kubelet", Source: corev1.EventSource{Component: v1alpha1.AgentEventSource}, Message: value}
	if got := EventMessage(forged, values(resolver.Sensitive{"p": value}, nil)); got != resolver.Masked {
		t.Errorf("an event the kubelet reports: %q, want it masked", got)
	}
	if reads != 1 {
		t.Errorf("the values were read %d times, want once (for the kubelet's event only)", reads)
	}
}
