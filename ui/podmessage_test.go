package ui_test

import (
	"context"
	"html"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
	"github.com/styrmin/styrmin/ui"
)

// TestAPodsTerminationMessageShowsNoSecret: the deployment page lists
// every pod of the namespace with its container's reason and message, and
// a terminated container's message is what its program wrote. With
// terminationMessagePolicy FallbackToLogsOnError it is the end of its
// log (a failed migration printing its connection string, password and
// all): not shown at all. One the program wrote to its termination file is
// shown masked with the deployment's sensitive values (the release's
// Secret of them), or withheld when whoever reads the pods may not read
// that Secret.
func TestAPodsTerminationMessageShowsNoSecret(t *testing.T) {
	w := newDemoWorld(t)
	c, _ := controlPlane(t)
	ctx := context.Background()
	const ns = "dev-web"
	// A password the chart took from a Kubernetes Secret: no Styrmin
	// sensitive value, so only dropping the message keeps it off the page.
	const kubeSecret = "kube-db-pass-7f3a9"

	withSensitiveSecret(t, w, ns)

	terminated := func(name string, policy corev1.TerminationMessagePolicy, code int32, message string) {
		t.Helper()
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyNever,
				Containers: []corev1.Container{{Name: "migrate", Image: "web:1.25.0", TerminationMessagePolicy: policy}}},
		}
		create(t, w.cl, pod)
		pod.Status = corev1.PodStatus{Phase: corev1.PodFailed,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "migrate", State: corev1.ContainerState{
				Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: code, Message: message}}}}}
		if err := w.cl.Status().Update(ctx, pod); err != nil {
			t.Fatal(err)
		}
	}
	terminated("migrate-from-logs", corev1.TerminationMessageFallbackToLogsOnError, 1,
		"FATAL: connecting to postgres://app:"+secretValue+"@db:5432/app (admin password "+kubeSecret+"): refused")
	terminated("migrate-from-file", corev1.TerminationMessageReadFile, 2,
		"migration 42 failed: the API refused key "+secretValue)

	page := func(h http.Handler) string {
		t.Helper()
		srv := httptest.NewServer(h)
		defer srv.Close()
		code, _, body := get(t, srv, "/d/local/dev/web")
		if code != http.StatusOK {
			t.Fatalf("%d\n%s", code, body)
		}
		// As the browser shows it: html/template writes "+" as "&#43;".
		if found := secrettest.Find([]byte(html.UnescapeString(body)), secretValue); len(found) > 0 {
			t.Errorf("the page shows the sensitive value as %s", strings.Join(found, ", "))
		}
		if strings.Contains(body, kubeSecret) {
			t.Errorf("the page shows the password a log-derived termination message held")
		}
		return body
	}

	body := page(w.h)
	wantIn(t, "dev/web with the failed migrations", body,
		"migrate-from-logs", "<small>exit code 1</small>",
		"migrate-from-file", "<small>exit code 2: migration 42 failed: the API refused key (sensitive)</small>")

	// Whoever reads the pods for the page (the agent's identity, a
	// user's) may not be allowed the Secret: the message is withheld.
	h := handlerWithoutSecrets(t, w, c, ns, "pod-viewer")
	body = page(h)
	wantIn(t, "dev/web read by an identity without the Secret", body,
		"migrate-from-file", "<small>exit code 2: [", "bytes of termination message withheld", "forbidden")
}

// create makes obj and deletes it when the test ends (the control plane is
// shared by the package's tests).
func create(t *testing.T, cl client.Client, obj client.Object) {
	t.Helper()
	if err := cl.Create(context.Background(), obj); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cl.Delete(context.Background(), obj); client.IgnoreNotFound(err) != nil {
			t.Error(err)
		}
	})
}

// withSensitiveSecret writes the release's Secret of sensitive values in
// ns, as the agent writes it: secretValue under the digest of dev/web's
// one placeholder.
func withSensitiveSecret(t *testing.T, w *demoWorld, ns string) {
	t.Helper()
	in := w.git.lockAt(t, w.git.lockCommits[1], idDevWeb)
	data := map[string][]byte{}
	for _, v := range in.Context.Parameters {
		if s, ok := v.(string); ok {
			if d, ok := resolver.PlaceholderDigest(s); ok {
				data[d] = []byte(secretValue)
			}
		}
	}
	if len(data) != 1 {
		t.Fatalf("dev/web's instance holds %d placeholders, want 1", len(data))
	}
	create(t, w.cl, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.SensitiveSecretName, Namespace: ns}, Data: data})
}

// handlerWithoutSecrets is the UI reading the cluster live as user, who
// may get and list pods and events in ns and read no Secret (the agent's
// identity or a user's may not).
func handlerWithoutSecrets(t *testing.T, w *demoWorld, c *testcluster.Cluster, ns, user string) http.Handler {
	t.Helper()
	rules := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods", "events"}, Verbs: []string{"get", "list"}}}
	create(t, w.cl, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns}, Rules: rules})
	create(t, w.cl, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
		Subjects: []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user}}})
	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	viewer, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	h, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "local", Reader: w.cl, Live: viewer}}, Repo: w.git.repo})
	if err != nil {
		t.Fatal(err)
	}
	return h
}
