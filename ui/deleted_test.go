package ui_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/ui"
)

// After a deletion the agent removes the StyrminDeployment and keeps the
// tasks (the namespace stays): dev/hub's sequence 1 succeeded and its
// tombstone, sequence 2 at git's head, succeeded. The overview shows it
// deleted, with the tombstone active: not behind git, not counted behind
// or not ready, not listed by ?state=behind or notready.
func TestADeletedDeploymentShowsAsDeletedNotBehindItsTombstone(t *testing.T) {
	d := newDesired(t)
	d.lock(t)
	if err := os.Remove(filepath.Join(d.dir, devHub)); err != nil {
		t.Fatal(err)
	}
	d.change(t, "Delete dev/hub", nil)
	if in := d.lockAt(t, d.head(t), idDevHub); !in.Tombstone() || in.Sequence != 2 {
		t.Fatalf("the lock at git's head is %s sequence %d, want the tombstone at 2", in.Kind, in.Sequence)
	}
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	did := instance.DeploymentID(idDevHub)
	task := func(seq int64, workflow v1alpha1.Workflow, kind string) *v1alpha1.StyrminTask {
		labels := did.Labels()
		labels[v1alpha1.LabelSequence] = fmt.Sprint(seq)
		return &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(idDevHub.Name, seq), Namespace: "dev-hub", Labels: labels},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: did, Namespace: "dev-hub", Workflow: workflow, FromSequence: seq - 1, ToSequence: seq,
				Lock: v1alpha1.LockRef{Path: idDevHub.LockPath()}, Target: &v1alpha1.TaskTarget{Kind: kind}},
			Status: v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded, Workflow: workflow, FromSequence: seq - 1, StartedAt: at(int(seq) * 100), FinishedAt: at(int(seq)*100 + 30)},
		}
	}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		task(1, v1alpha1.WorkflowCreate, v1alpha1.KindInstance),
		task(2, v1alpha1.WorkflowDelete, v1alpha1.KindTombstone),
	).Build()
	h, err := ui.New(ui.Options{Clusters: []ui.Cluster{{Name: "local", Reader: cl}}, Repo: d.repo})
	if err != nil {
		t.Fatal(err)
	}
	body := getHost(h, "localhost", "/").Body.String()
	r := rowOf(body, "/d/local/dev/hub")
	// Locked, applied, active; the state.
	for _, want := range []string{"<td>2</td><td>0</td><td>2</td>", ">deleted</span>"} {
		if !strings.Contains(r, want) {
			t.Errorf("the row of dev/hub lacks %q:\n%s", want, r)
		}
	}
	// The other three deployments are locked and not applied: behind.
	wantIn(t, "the overview's counts", body, "3 behind git", "0 not ready")
	for _, state := range []string{"behind", "notready"} {
		if page := getHost(h, "localhost", "/?state="+state).Body.String(); strings.Contains(page, `href="/d/local/dev/hub"`) {
			t.Errorf("?state=%s lists the deleted dev/hub:\n%s", state, rowOf(page, "/d/local/dev/hub"))
		}
	}
}
