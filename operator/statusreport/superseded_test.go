package statusreport_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/commitstatus"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/statusreport"
	"github.com/styrmin/styrmin/testcluster"
)

// TestASupersededChangesCommitFollowsTheNewerInstanceThatTookItOn: a
// change superseded before it ran never ran as its own; the newer
// instance that superseded it carries its content. Its lock commit was
// posted green at once, "superseded by a newer instance", while that
// newer instance had not run, and stayed green when it failed: the pull
// request showed a change applied that the cluster never ran. Now the
// commit follows the newer instance: pending while it runs, a failure
// naming the deployment and sequence when it failed, a success when it
// was applied; a failure posted stays once the newer task is pruned.
func TestASupersededChangesCommitFollowsTheNewerInstanceThatTookItOn(t *testing.T) {
	ctx, cl, create, report := reporting(t)
	now := time.Now()
	older, newer := strings.Repeat("a", 40), strings.Repeat("b", 40)
	applied, its := strings.Repeat("c", 40), strings.Repeat("d", 40)
	create(taskOf("hub", older, 3, v1alpha1.TaskSuperseded, now), 4, false)
	hub := create(taskOf("hub", newer, 4, v1alpha1.TaskRunning, time.Time{}), 0, false)
	create(taskOf("web", applied, 2, v1alpha1.TaskSuperseded, now), 3, false)
	create(taskOf("web", its, 3, v1alpha1.TaskSucceeded, now), 0, false)
	// A superseded task whose newer one the cluster no longer has (pruned)
	// or that names none counts as before.
	create(taskOf("api", strings.Repeat("e", 40), 5, v1alpha1.TaskSuperseded, now), 6, false)

	got := report()
	for sha, want := range map[string]string{
		"a": "pending prod: 1 deployment superseded by a newer instance not applied yet",
		"b": "pending prod: 1 deployment running or waiting",
		"c": "success prod: 1 deployment superseded by a newer instance",
		"d": "success prod: 1 deployment applied",
		"e": "success prod: 1 deployment superseded by a newer instance",
	} {
		if got[sha] != want {
			t.Errorf("commit %s: posted %q, want %q", sha, got[sha], want)
		}
	}

	hub.Status.Phase, hub.Status.FinishedAt = v1alpha1.TaskFailed, &metav1.Time{Time: now.Add(time.Minute)}
	if err := cl.Status().Update(ctx, hub); err != nil {
		t.Fatal(err)
	}
	got = report()
	if want := "failure prod: prod/dev/hub (as sequence 4) failed"; got["a"] != want || len(got) != 2 {
		t.Errorf("once the newer instance failed: posted %v, want the superseded change's commit %q and the newer one's failure", got, want)
	}

	// The agent prunes the newer task: the failure posted stands.
	if err := cl.Delete(ctx, hub); err != nil {
		t.Fatal(err)
	}
	if got := report(); len(got) != 0 {
		t.Errorf("once the newer task was pruned: posted %v, want nothing", got)
	}
}

// TestAWithdrawnChangesCommitIsNotGreen: a change whose lock commit a
// force push or a rewind took away before its task ran ends Superseded,
// reason Withdrawn: nothing of it was applied, and no newer instance
// took it on. Its commit was posted green, "superseded by a newer
// instance", and so was the commit of an older change superseded before
// it ran by that withdrawn one: a pipeline waiting for the commit's
// status went on as if the cluster ran it. Both are failures now, naming
// the deployment; and once the withdrawn change's commit is back on the
// branch, its task made again under its name and applied, the commit
// turns green.
func TestAWithdrawnChangesCommitIsNotGreen(t *testing.T) {
	ctx, cl, create, report := reporting(t)
	now := time.Now()
	// hub: change 5 superseded before it ran by 6, which was withdrawn.
	create(taskOf("hub", strings.Repeat("a", 40), 5, v1alpha1.TaskSuperseded, now), 6, false)
	create(taskOf("hub", strings.Repeat("b", 40), 6, v1alpha1.TaskSuperseded, now), 0, true)
	// web: change 3 withdrawn.
	web := create(taskOf("web", strings.Repeat("c", 40), 3, v1alpha1.TaskSuperseded, now), 0, true)
	got := report()
	for sha, want := range map[string]string{
		"a": "failure prod: prod/dev/hub (as sequence 6) not applied: withdrawn from the branch before it ran",
		"b": "failure prod: prod/dev/hub not applied: withdrawn from the branch before it ran",
		"c": "failure prod: prod/dev/web not applied: withdrawn from the branch before it ran",
	} {
		if got[sha] != want {
			t.Errorf("commit %s: posted %q, want %q", sha, got[sha], want)
		}
	}

	// web's lock commit is back on the branch: the sync deletes the
	// withdrawn task and makes it again, and it is applied before the
	// reporter's next look.
	if err := cl.Delete(ctx, web); err != nil {
		t.Fatal(err)
	}
	create(taskOf("web", strings.Repeat("c", 40), 3, v1alpha1.TaskSucceeded, now.Add(time.Minute)), 0, false)
	if got, want := report()["c"], "success prod: 1 deployment applied"; got != want {
		t.Errorf("once the withdrawn change came back and was applied: posted %q, want %q", got, want)
	}
}

// TestAChangeSupersededByAWithdrawnOneFollowsTheNextChangeLocked: change
// 5 superseded before it ran by 6, and 6 withdrawn (a force push took its
// lock commit away); the next lock, 7, made on the branch that holds 5,
// carries 5's change. 5's commit stayed a failure, "not applied", after 7
// was applied (status showed the deployment up to date), the reporter
// never posted it again (its tasks had not changed), and one that first
// reached it after 7 succeeded posted it red at once. Now it follows 7:
// pending while 7 runs, green once 7 was applied, a failure naming 7 when
// it failed; the withdrawn change's own commit stays a failure.
func TestAChangeSupersededByAWithdrawnOneFollowsTheNextChangeLocked(t *testing.T) {
	ctx, cl, create, report := reporting(t)
	now := time.Now()
	// hub: 5 superseded by 6, 6 withdrawn; 7 not locked yet.
	create(taskOf("hub", strings.Repeat("a", 40), 5, v1alpha1.TaskSuperseded, now), 6, false)
	create(taskOf("hub", strings.Repeat("b", 40), 6, v1alpha1.TaskSuperseded, now), 0, true)
	// web: 2 superseded by 3, 3 withdrawn, then 4 applied, all before the
	// reporter's first look; api: the same, 4 failed.
	create(taskOf("web", strings.Repeat("c", 40), 2, v1alpha1.TaskSuperseded, now), 3, false)
	create(taskOf("web", strings.Repeat("d", 40), 3, v1alpha1.TaskSuperseded, now), 0, true)
	create(taskOf("web", strings.Repeat("e", 40), 4, v1alpha1.TaskSucceeded, now), 0, false)
	create(taskOf("api", strings.Repeat("f", 40), 2, v1alpha1.TaskSuperseded, now), 3, false)
	create(taskOf("api", strings.Repeat("0", 40), 3, v1alpha1.TaskSuperseded, now), 0, true)
	create(taskOf("api", strings.Repeat("1", 40), 4, v1alpha1.TaskFailed, now), 0, false)
	got := report()
	for sha, want := range map[string]string{
		"a": "failure prod: prod/dev/hub (as sequence 6) not applied: withdrawn from the branch before it ran",
		"b": "failure prod: prod/dev/hub not applied: withdrawn from the branch before it ran",
		"c": "success prod: 1 deployment superseded by a newer instance",
		"d": "failure prod: prod/dev/web not applied: withdrawn from the branch before it ran",
		"f": "failure prod: prod/dev/api (as sequence 4) failed",
	} {
		if got[sha] != want {
			t.Errorf("commit %s: posted %q, want %q", sha, got[sha], want)
		}
	}

	// hub's next lock, 7, on the branch that holds 5: it runs, then is
	// applied.
	seven := create(taskOf("hub", strings.Repeat("2", 40), 7, v1alpha1.TaskRunning, time.Time{}), 0, false)
	if got, want := report()["a"], "pending prod: 1 deployment superseded by a newer instance not applied yet"; got != want {
		t.Errorf("while the next lock runs: commit a posted %q, want %q", got, want)
	}
	seven.Status.Phase, seven.Status.FinishedAt = v1alpha1.TaskSucceeded, &metav1.Time{Time: now.Add(time.Minute)}
	if err := cl.Status().Update(ctx, seven); err != nil {
		t.Fatal(err)
	}
	got = report()
	if want := "success prod: 1 deployment superseded by a newer instance"; got["a"] != want {
		t.Errorf("once the next lock was applied: commit a posted %q, want %q", got["a"], want)
	}
	if _, ok := got["b"]; ok {
		t.Errorf("the withdrawn change's commit was posted again: %q", got["b"])
	}
}

// reporting starts a control plane with namespace apps and a reporter
// for cluster prod posting to a GitHub that records what it is sent.
// create writes a task and its status, superseded by supersededBy and,
// when withdrawn, ended as the task controller ends a withdrawn one
// (task.Reconciler.withdrawn); report runs one look and returns what it
// posted, by the first hex digit of each commit.
func reporting(t *testing.T) (ctx context.Context, cl client.Client, create func(tk *v1alpha1.StyrminTask, supersededBy int64, withdrawn bool) *v1alpha1.StyrminTask, report func() map[string]string) {
	t.Helper()
	_, cl = agenttest.StartCluster(t, testcluster.Options{})
	ctx = context.Background()
	gh := &gitHub{}
	srv := httptest.NewServer(gh)
	t.Cleanup(srv.Close)
	poster, err := commitstatus.New(commitstatus.Options{BaseURL: srv.URL, Owner: "acme", Repo: "desired", Token: token})
	if err != nil {
		t.Fatal(err)
	}
	r, err := statusreport.New(statusreport.Options{Reader: cl, Poster: poster, Cluster: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}}); err != nil {
		t.Fatal(err)
	}
	create = func(tk *v1alpha1.StyrminTask, supersededBy int64, withdrawn bool) *v1alpha1.StyrminTask {
		t.Helper()
		st := tk.Status
		st.SupersededBy = supersededBy
		if withdrawn {
			st.Conditions = []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse,
				Reason: v1alpha1.ReasonTaskWithdrawn, Message: "withdrawn before it ran", LastTransitionTime: metav1.Now()}}
		}
		if err := cl.Create(ctx, tk); err != nil {
			t.Fatal(err)
		}
		tk.Status = st
		if err := cl.Status().Update(ctx, tk); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	report = func() map[string]string {
		t.Helper()
		if err := r.Report(ctx); err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for _, p := range gh.take() {
			got[p.sha[:1]] = string(p.State) + " " + p.Description
		}
		return got
	}
	return ctx, cl, create, report
}
