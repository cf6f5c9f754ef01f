package ui_test

import (
	"html"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAnEventAProgramsOutputWroteShowsNoSecret: the kubelet quotes a
// failed probe's output in its Unhealthy event, and a readiness probe
// `psql "$DATABASE_URL" -c "select 1"` says the URL, password and all. The
// deployment page lists the namespace's events: one the agent did not
// write is shown masked with the deployment's sensitive values, or
// withheld when whoever reads the events may not read them; the agent's
// own stay as written. The task page lists the task's own events only,
// not those of a StatefulSet's pod of the task's name (web-2).
func TestAnEventAProgramsOutputWroteShowsNoSecret(t *testing.T) {
	w := newDemoWorld(t)
	c, _ := controlPlane(t)
	const ns = "dev-web"
	withSensitiveSecret(t, w, ns)
	probe := "Readiness probe failed: psql: error: connection to server at \"db\" failed: postgres://app:" + secretValue + "@db:5432/app: password authentication failed"
	now := metav1.Now()
	unhealthy := func(name, pod string) {
		t.Helper()
		create(t, w.cl, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod, APIVersion: "v1", FieldPath: "spec.containers{web}"},
			Reason:         "Unhealthy", Message: probe, Type: corev1.EventTypeWarning,
			Source: corev1.EventSource{Component: "kubelet", Host: "node-1"}, FirstTimestamp: now, LastTimestamp: now, Count: 3})
	}
	unhealthy("web-7f9-abcde.unhealthy", "web-7f9-abcde")
	unhealthy("web-2.unhealthy", v1alpha1.TaskName("web", 2))

	page := func(h http.Handler, path string) string {
		t.Helper()
		srv := httptest.NewServer(h)
		defer srv.Close()
		code, _, body := get(t, srv, path)
		if code != http.StatusOK {
			t.Fatalf("%s: %d\n%s", path, code, body)
		}
		// As the browser shows it: html/template writes "+" as "&#43;".
		if found := secrettest.Find([]byte(html.UnescapeString(body)), secretValue); len(found) > 0 {
			t.Errorf("%s shows the sensitive value as %s", path, strings.Join(found, ", "))
		}
		return body
	}

	body := html.UnescapeString(page(w.h, "/d/local/dev/web"))
	wantIn(t, "dev/web with a failed probe", body,
		"Pod/web-7f9-abcde", "Readiness probe failed: psql: error: connection to server at \"db\" failed: postgres://app:(sensitive)@db:5432/app",
		"update/core/1:waitReady: ProgressDeadlineExceeded")
	body = html.UnescapeString(page(w.h, "/t/local/dev-web/web-2"))
	wantIn(t, "task web-2", body, "StepFailed", "update/core/1:waitReady: ProgressDeadlineExceeded")
	if strings.Contains(body, "Unhealthy") {
		t.Errorf("the page of task web-2 lists the events of pod web-2:\n%s", body)
	}

	// Whoever reads the events for the page may not be allowed the
	// Secret: the probe's output is withheld, saying why; the agent's
	// events are shown.
	h := handlerWithoutSecrets(t, w, c, ns, "event-viewer")
	body = page(h, "/d/local/dev/web")
	wantIn(t, "dev/web read by an identity without the Secret", body,
		"Pod/web-7f9-abcde", "bytes of event message withheld: the deployment&#39;s sensitive values could not be read", "forbidden",
		"update/core/1:waitReady: ProgressDeadlineExceeded")
}
