package health

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// EventMessage is an event's message as every place that shows one shows
// it (a status, the web UI). The agent's own notes are kept as written:
// it masks what it writes. Any other writer's may carry what a program
// printed, and a program may print a value it was given: the kubelet's
// failed probe (Unhealthy, ProbeWarning) and lifecycle hook
// (FailedPostStartHook, FailedPreStopHook) quote the command's output,
// `psql "$DATABASE_URL"` saying the URL, password and all, and a chart's
// own operator writes what it likes. So every other message is masked
// with the deployment's sensitive values (sensitive, called only then;
// nil: there are none), and withheld, saying why, when they cannot be
// read, as a container's termination message is (PodSummary).
func EventMessage(e *corev1.Event, sensitive SensitiveValues) string {
	if e.Message == "" || byAgent(e) {
		return e.Message
	}
	return masked("event message", e.Message, sensitive)
}

// byAgent reports whether the agent wrote e (the events API names its
// reporting controller; the older one, its source).
func byAgent(e *corev1.Event) bool {
	return e.ReportingController == v1alpha1.AgentEventSource ||
		e.ReportingController == "" && e.Source.Component == v1alpha1.AgentEventSource
}
