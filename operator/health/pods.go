package health

import (
	"context"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/eventnote"
	"github.com/styrmin/styrmin/resolver"
)

// maxPods bounds the pods reported per workload.
const maxPods = 5

// Pods reads the pods of a workload that are not ready (straight from the
// API server: the agent caches no pods) and summarises each by
// PodSummary. At most a few, sorted by name.
//
// workloads reads the workload (the manager's cache), pods its pods; a
// message that needs masking is masked with sensitive (NamespaceSensitive,
// shared by the checks of one deployment's workloads: one read at most).
func Pods(ctx context.Context, workloads, pods client.Reader, namespace string, w v1alpha1.WorkloadStatus, sensitive SensitiveValues) ([]v1alpha1.PodStatus, error) {
	selector, err := workloadSelector(ctx, workloads, namespace, w)
	if err != nil || selector == nil {
		return nil, err
	}
	var list corev1.PodList
	if err := pods.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels(selector)); err != nil {
		return nil, fmt.Errorf("listing the pods of %s/%s: %w", w.Kind, w.Name, err)
	}
	var out []v1alpha1.PodStatus
	for i := range list.Items {
		if ps := PodSummary(&list.Items[i], sensitive); !ps.Ready {
			out = append(out, ps)
		}
	}
	slices.SortFunc(out, func(a, b v1alpha1.PodStatus) int { return strings.Compare(a.Name, b.Name) })
	if len(out) > maxPods {
		out = out[:maxPods]
	}
	return out, nil
}

// workloadSelector reads a workload's pod selector (its matchLabels).
func workloadSelector(ctx context.Context, c client.Reader, namespace string, w v1alpha1.WorkloadStatus) (map[string]string, error) {
	key := client.ObjectKey{Namespace: namespace, Name: w.Name}
	var sel *metav1.LabelSelector
	var err error
	switch w.Kind {
	case "Deployment":
		var d appsv1.Deployment
		err = c.Get(ctx, key, &d)
		sel = d.Spec.Selector
	case "StatefulSet":
		var s appsv1.StatefulSet
		err = c.Get(ctx, key, &s)
		sel = s.Spec.Selector
	case "DaemonSet":
		var d appsv1.DaemonSet
		err = c.Get(ctx, key, &d)
		sel = d.Spec.Selector
	}
	if err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if sel == nil || len(sel.MatchLabels) == 0 {
		return nil, nil
	}
	return sel.MatchLabels, nil
}

// SensitiveValues returns the values a pod's messages are masked with
// (nil: there are none), or why they could not be read.
type SensitiveValues func() (resolver.Sensitive, error)

// NamespaceSensitive returns the SensitiveValues of a deployment's
// namespace: the Secret its release writes them to
// (v1alpha1.SensitiveSecretName), read through r at the first call, and
// only then: a pod summary asks for them only when it shows a message a
// container's program wrote, which is seldom. No Secret: no values (an
// instance without sensitive parameters). r must read the API server, not
// a cache (the agent does not watch Secrets). For one goroutine.
func NamespaceSensitive(ctx context.Context, r client.Reader, namespace string) SensitiveValues {
	var (
		read   bool
		values resolver.Sensitive
		err    error
	)
	return func() (resolver.Sensitive, error) {
		if read {
			return values, err
		}
		read = true
		var sec corev1.Secret
		err = r.Get(ctx, client.ObjectKey{Namespace: namespace, Name: v1alpha1.SensitiveSecretName}, &sec)
		switch {
		case apierrors.IsNotFound(err):
			err = nil
		case err != nil:
			// The error names the Secret, never a value.
			err = fmt.Errorf("reading Secret %s/%s: %w", namespace, v1alpha1.SensitiveSecretName, err)
		default:
			values = resolver.SensitiveByDigest(sec.Data)
		}
		return values, err
	}
}

// fromLogs reports whether container's termination message may be the end
// of its log (terminationMessagePolicy FallbackToLogsOnError): a log may
// hold any value the program was given, a Kubernetes Secret's included,
// and the status is read by more people than the pod's logs; a message
// the program wrote to its termination file on purpose is kept.
func fromLogs(p *corev1.Pod, container string) bool {
	for _, c := range p.Spec.Containers {
		if c.Name == container {
			return c.TerminationMessagePolicy == corev1.TerminationMessageFallbackToLogsOnError
		}
	}
	return true // not known: as if it were
}

// PodSummary summarises one pod, for every place that shows one (the
// StyrminDeployment's status, the web UI): its phase, restarts and the
// first container not ready's waiting or terminated reason
// (CrashLoopBackOff, ImagePullBackOff, Error) with its message.
//
// A terminated container's message is what its program wrote, and may hold
// any value it was given: one that may be the end of its log (fromLogs) is
// dropped, as it may hold any secret, a Kubernetes Secret's included; one
// written to the termination file on purpose is kept, masked with the
// deployment's sensitive values (sensitive, called only then; nil: there
// are none). When those cannot be read the message is withheld, saying
// why: unmasked, it could show one.
func PodSummary(p *corev1.Pod, sensitive SensitiveValues) v1alpha1.PodStatus {
	ps := v1alpha1.PodStatus{Name: p.Name, Phase: podPhase(p), Reason: p.Status.Reason, Message: p.Status.Message}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			ps.Ready = c.Status == corev1.ConditionTrue
		}
	}
	reasonSet := false
	for _, cs := range p.Status.ContainerStatuses {
		ps.Restarts += cs.RestartCount
		if reasonSet || cs.Ready {
			continue
		}
		switch {
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
			ps.Reason, ps.Message, reasonSet = cs.State.Waiting.Reason, cs.State.Waiting.Message, true
		case cs.State.Terminated != nil && cs.State.Terminated.Reason != "":
			t := cs.State.Terminated
			ps.Reason, ps.Message, reasonSet = t.Reason, fmt.Sprintf("exit code %d", t.ExitCode), true
			if t.Message != "" && !fromLogs(p, cs.Name) {
				ps.Message += ": " + programMessage(t.Message, sensitive)
			}
		}
	}
	// Cut after masking: what is cut cannot show part of a value.
	ps.Message = eventnote.Cut(ps.Message, maxPodMessage)
	return ps
}

// podPhase is the pod's phase as `kubectl get pods` shows it for one being
// deleted: Terminating while it has not ended. A pod whose node is gone
// stays so until someone deletes it for good, and its phase (Running)
// read as if it still served; a StatefulSet waits for it before it makes
// the pod again.
func podPhase(p *corev1.Pod) string {
	if p.DeletionTimestamp != nil && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
		return "Terminating"
	}
	return string(p.Status.Phase)
}

// maxPodMessage bounds a pod's message. A termination message may be 4
// KiB and the status lists up to five pods of each workload not ready: a
// release of hundreds of crashing workloads made a status the API server
// refused, and its write failed for ever.
const maxPodMessage = 1 << 10

// programMessage is a message a container's program wrote, masked with the
// sensitive values, or withheld when they cannot be read.
func programMessage(msg string, sensitive SensitiveValues) string {
	return masked("termination message", msg, sensitive)
}

// statusMessage is msg, kstatus's message for u (a custom resource, a
// Job, a claim), as a status shows it. One a condition of u's status holds
// (Ready=False, Stalled, Reconciling) is what u's controller wrote, and
// that may be any program: a database operator's Ready=False may quote the
// connection string it could not use, password and all, and the
// deployment's status is read by more people than the Secret that holds
// it. It is masked, or withheld, as a program's message is, then cut (an
// operator may write a condition of any length, and the status lists
// every custom resource). One kstatus made itself ("Database generation is
// 2, but latest observed generation is 1", "Job in progress") is kept:
// the values are read only for a controller's.
func statusMessage(u *unstructured.Unstructured, msg string, sensitive SensitiveValues) string {
	if msg == "" || !conditionSays(u, msg) {
		return msg
	}
	return eventnote.Cut(masked("status message", msg, sensitive), maxPodMessage)
}

// conditionSays reports whether a condition of u's status has msg for its
// message.
func conditionSays(u *unstructured.Unstructured, msg string) bool {
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		if m, _ := c.(map[string]any); m["message"] == msg {
			return true
		}
	}
	return false
}

// masked is msg, a text that may hold what a program printed (what names
// it), masked with the sensitive values, or withheld when they cannot be
// read: unmasked, it could show one.
func masked(what, msg string, sensitive SensitiveValues) string {
	if sensitive == nil {
		return msg
	}
	values, err := sensitive()
	if err != nil {
		return fmt.Sprintf("[%d bytes of %s withheld: the deployment's sensitive values could not be read to mask it: %v]", len(msg), what, err)
	}
	return values.Mask(msg)
}
