package ui_test

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/ui"
)

// The namespace a lockfile names is git's word only until the agent
// applies it: a lockfile committed by hand for a deployment the cluster
// never ran (the agent refuses it) can name another team's namespace.
// Its page shows what git locks, not that namespace's pods and events.
func TestThePageOfADeploymentOnlyGitLocksShowsNoPodsOrEventsOfTheNamespaceItsLockfileNames(t *testing.T) {
	_, cl := controlPlane(t)
	const other = "other-team"
	create(t, cl, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}})
	create(t, cl, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "payroll-db-0", Namespace: other},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "postgres:16"}}}})
	create(t, cl, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "payroll.1", Namespace: other},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: other, Name: "payroll-db-0"},
		Reason:         "Payroll", Message: "payroll run for the other team", Type: corev1.EventTypeNormal})

	d := newDesired(t)
	d.lock(t)
	// dev/web's lockfile, renamed to a deployment no configuration has,
	// its namespace the other team's, its checksum made anew.
	in := d.lockAt(t, d.head(t), idDevWeb)
	in.ID = resolver.ID{Cluster: "local", Environment: "dev", Name: "intruder"}
	in.Context.Deployment.Namespace = other
	data, err := resolver.EncodeLock(in)
	if err != nil {
		t.Fatal(err)
	}
	write(t, d.dir, filepath.FromSlash(in.ID.LockPath()), string(data))
	git(t, d.dir, "add", "-A")
	git(t, d.dir, "commit", "--quiet", "-m", "A lockfile committed by hand")

	h, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "local", Reader: cl}}, Repo: d.repo})
	if err != nil {
		t.Fatal(err)
	}
	rec := getHost(h, "localhost", "/d/local/dev/intruder")
	body := rec.Body.String()
	if rec.Code != http.StatusOK || !strings.Contains(body, "git locks sequence") {
		t.Fatalf("GET the page of a deployment git locks: %d\n%s", rec.Code, body)
	}
	for _, other := range []string{"payroll-db-0", "payroll run for the other team"} {
		if strings.Contains(body, other) {
			t.Errorf("the page shows %q, of the namespace the lockfile names:\n%s", other, body)
		}
	}
}
