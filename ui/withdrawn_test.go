package ui_test

import (
	"context"
	"fmt"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAWithdrawnTasksPageSaysNothingOfItWasApplied: a task whose lock
// commit a force push took away before it ran ends Superseded, reason
// Withdrawn. Its page said a newer instance the cluster held "includes
// this change": nothing of it was applied, and no newer instance carries
// it. So said the page of a change superseded before it ran by the
// withdrawn one, which was not applied either.
func TestAWithdrawnTasksPageSaysNothingOfItWasApplied(t *testing.T) {
	w := newDemoWorld(t)
	ctx := context.Background()
	const ns = "dev-withdrawn"
	create(t, w.cl, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "withdrawn"}
	tk := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(id.Name, 2), Namespace: ns, Labels: id.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowUpdate, FromSequence: 1, ToSequence: 2,
			Lock: v1alpha1.LockRef{Commit: strings.Repeat("6", 40), Path: "locks/local/dev/withdrawn.lock.yaml"}},
	}
	create(t, w.cl, tk)
	tk.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSuperseded, StartedAt: at(1), FinishedAt: at(1),
		Message: "withdrawn before it ran: the branch no longer holds lock commit 666666666666",
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonTaskWithdrawn,
			Message: "withdrawn before it ran", LastTransitionTime: *at(1)}}}
	if err := w.cl.Status().Update(ctx, tk); err != nil {
		t.Fatal(err)
	}
	_, _, page := get(t, w.srv, "/t/local/"+ns+"/"+tk.Name)
	wantIn(t, "the withdrawn task", page, "Withdrawn: when this task", "nothing of it was applied")
	if strings.Contains(page, "includes this change") || strings.Contains(page, "the cluster already held") {
		t.Errorf("the withdrawn task's page says a newer instance carries its change:\n%s", page)
	}

	older := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(id.Name, 1), Namespace: ns, Labels: id.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowUpdate, ToSequence: 1,
			Lock: v1alpha1.LockRef{Commit: strings.Repeat("5", 40), Path: "locks/local/dev/withdrawn.lock.yaml"}},
	}
	create(t, w.cl, older)
	older.Status = v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSuperseded, StartedAt: at(1), FinishedAt: at(1), SupersededBy: 2,
		Message: "superseded by sequence 2 before it ran: the newer task writes the whole configuration"}
	if err := w.cl.Status().Update(ctx, older); err != nil {
		t.Fatal(err)
	}
	_, _, page = get(t, w.srv, "/t/local/"+ns+"/"+older.Name)
	wantIn(t, "the task superseded by the withdrawn one", page, "Superseded by sequence 2 before it ran, and sequence 2 was then withdrawn", "Neither was applied")
	if strings.Contains(page, "includes this change") {
		t.Errorf("the page of a task superseded by a withdrawn one says the newer instance carries its change:\n%s", page)
	}
}

// TestAChangeSupersededByAWithdrawnOnesPageNamesTheLockThatCarriesIt:
// change 1 superseded before it ran by 2, 2 withdrawn since, and the next
// lock, 3, made on the branch that holds 1, carries 1's change. The page
// of 1 said neither was applied, however 3 ended: it now names 3 and
// says where it is, not applied yet while it runs, applied once it
// succeeded.
func TestAChangeSupersededByAWithdrawnOnesPageNamesTheLockThatCarriesIt(t *testing.T) {
	w := newDemoWorld(t)
	ctx := context.Background()
	const ns = "dev-carried"
	create(t, w.cl, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "carried"}
	mk := func(seq int64, st v1alpha1.StyrminTaskStatus) *v1alpha1.StyrminTask {
		t.Helper()
		tk := &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(id.Name, seq), Namespace: ns, Labels: id.Labels()},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowUpdate, FromSequence: seq - 1, ToSequence: seq,
				Lock: v1alpha1.LockRef{Commit: strings.Repeat(fmt.Sprint(seq), 40), Path: "locks/local/dev/carried.lock.yaml"}},
		}
		create(t, w.cl, tk)
		tk.Status = st
		if err := w.cl.Status().Update(ctx, tk); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	mk(1, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSuperseded, StartedAt: at(1), FinishedAt: at(1), SupersededBy: 2,
		Message: "superseded by sequence 2 before it ran: the newer task writes the whole configuration"})
	mk(2, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSuperseded, StartedAt: at(2), FinishedAt: at(2),
		Message: "withdrawn before it ran: the branch no longer holds lock commit 222222222222",
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonTaskWithdrawn,
			Message: "withdrawn before it ran", LastTransitionTime: *at(2)}}})
	three := mk(3, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning, StartedAt: at(3)})
	page1 := "/t/local/" + ns + "/" + v1alpha1.TaskName(id.Name, 1)

	_, _, page := get(t, w.srv, page1)
	wantIn(t, "the page of 1 while 3 runs", page, "sequence 2 was then withdrawn", "Sequence 3, locked since on the branch", "not applied yet")
	if strings.Contains(page, "Neither was applied") {
		t.Errorf("the page of a change the next lock carries says it was not applied:\n%s", page)
	}

	three.Status.Phase, three.Status.FinishedAt = v1alpha1.TaskSucceeded, at(4)
	if err := w.cl.Status().Update(ctx, three); err != nil {
		t.Fatal(err)
	}
	_, _, page = get(t, w.srv, page1)
	wantIn(t, "the page of 1 once 3 was applied", page, "Sequence 3, locked since on the branch", "was applied")
	if strings.Contains(page, "Neither was applied") || strings.Contains(page, "not applied yet") {
		t.Errorf("the page of a change the next lock applied says it was not applied:\n%s", page)
	}
}

// TestASupersededBeforeItRanTasksPageSaysSoNotThatTheClusterHeldTheNewer:
// a task superseded before it ran (a newer change locked after it, its
// steps skipped) said "when this task came to write sequence N, the
// cluster already held sequence M": it never came to write, and the
// cluster may not have held M yet (the newer task had not run). It says
// it was superseded before it ran; one superseded by a change that
// deletes the deployment says nothing of it was applied, not that the
// newer instance includes it.
func TestASupersededBeforeItRanTasksPageSaysSoNotThatTheClusterHeldTheNewer(t *testing.T) {
	w := newDemoWorld(t)
	ctx := context.Background()
	const ns = "dev-early"
	create(t, w.cl, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "early"}
	mk := func(seq int64, wf v1alpha1.Workflow, st v1alpha1.StyrminTaskStatus) *v1alpha1.StyrminTask {
		tk := &v1alpha1.StyrminTask{
			ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(id.Name, seq), Namespace: ns, Labels: id.Labels()},
			Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: wf, ToSequence: seq,
				Lock: v1alpha1.LockRef{Commit: strings.Repeat(fmt.Sprint(seq), 40), Path: "locks/local/dev/early.lock.yaml"}},
		}
		create(t, w.cl, tk)
		tk.Status = st
		if err := w.cl.Status().Update(ctx, tk); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	skipped := []v1alpha1.TaskStep{{Name: "update/core/0:upgradeDeploymentVersion", Hook: "update", Mode: "core", Action: "upgradeDeploymentVersion", State: v1alpha1.StepSkipped, Message: "superseded before it ran"}}
	early := mk(1, v1alpha1.WorkflowUpdate, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSuperseded, FinishedAt: at(1), SupersededBy: 2, Steps: skipped,
		Message: "superseded by sequence 2 before it ran: the newer task writes the whole configuration"})
	mk(2, v1alpha1.WorkflowUpdate, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskRunning, StartedAt: at(2)})
	_, _, page := get(t, w.srv, "/t/local/"+ns+"/"+early.Name)
	wantIn(t, "the task superseded before it ran", page, "Superseded before it ran: sequence 2 of this deployment was locked after it", "ran none of its steps")
	if strings.Contains(page, "already held") || strings.Contains(page, "came to write") {
		t.Errorf("the page of a task superseded before it ran says it came to write and the cluster held the newer:\n%s", page)
	}

	deleted := mk(3, v1alpha1.WorkflowUpdate, supersededByDeletion(3, 4, "superseded by sequence 4, which deleted the deployment: an earlier change does not install it again"))
	mk(4, v1alpha1.WorkflowDelete, v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSucceeded, StartedAt: at(4), FinishedAt: at(4)})
	_, _, page = get(t, w.srv, "/t/local/"+ns+"/"+deleted.Name)
	wantNotCarried(t, "the task superseded by a deletion", page, 4)
}

// TestAPendingCreateSupersededByADeletionTasksPageSaysNothingWasApplied:
// a create superseded before it ran by a newer change deleting the
// deployment (the agent's pending path, whose words are "that change
// deletes the deployment") read as carried by the newer instance, "which
// includes this change": the page matched only the words of the other
// path. Both say so by their condition's reason.
func TestAPendingCreateSupersededByADeletionTasksPageSaysNothingWasApplied(t *testing.T) {
	w := newDemoWorld(t)
	const ns = "dev-pending"
	create(t, w.cl, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	id := v1alpha1.DeploymentID{Cluster: "local", Environment: "dev", Name: "pending"}
	tk := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(id.Name, 1), Namespace: ns, Labels: id.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: v1alpha1.WorkflowCreate, ToSequence: 1,
			Lock: v1alpha1.LockRef{Commit: strings.Repeat("1", 40), Path: "locks/local/dev/pending.lock.yaml"}},
	}
	create(t, w.cl, tk)
	st := supersededByDeletion(1, 2, "superseded by sequence 2 before it ran: that change deletes the deployment, which is not created first")
	st.Steps = []v1alpha1.TaskStep{{Name: "create/core/0:installDeploymentVersion", Hook: "create", Mode: "core", Action: "installDeploymentVersion",
		State: v1alpha1.StepSkipped, Message: "superseded before it ran"}}
	tk.Status = st
	if err := w.cl.Status().Update(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	_, _, page := get(t, w.srv, "/t/local/"+ns+"/"+tk.Name)
	wantNotCarried(t, "the pending create superseded by a deletion", page, 2)

	// Ended by an agent before the reason: Superseded, in either wording.
	for _, msg := range []string{
		"superseded by sequence 2 before it ran: that change deletes the deployment, which is not created first",
		"superseded by sequence 2, which deleted the deployment: an earlier change does not install it again",
	} {
		if err := w.cl.Get(context.Background(), client.ObjectKeyFromObject(tk), tk); err != nil {
			t.Fatal(err)
		}
		st.Conditions[0].Reason, st.Conditions[0].Message, st.Message = v1alpha1.ReasonTaskSuperseded, msg, msg
		tk.Status = st
		if err := w.cl.Status().Update(context.Background(), tk); err != nil {
			t.Fatal(err)
		}
		_, _, page = get(t, w.srv, "/t/local/"+ns+"/"+tk.Name)
		wantNotCarried(t, "a task an older agent ended superseded by a deletion ("+msg+")", page, 2)
	}
}

// supersededByDeletion is the status the agent writes of task seq ended
// before it ran by deletion by, in words msg.
func supersededByDeletion(seq, by int64, msg string) v1alpha1.StyrminTaskStatus {
	return v1alpha1.StyrminTaskStatus{Phase: v1alpha1.TaskSuperseded, FinishedAt: at(int(seq)), SupersededBy: by, Message: msg,
		Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: v1alpha1.ReasonSupersededByDeletion,
			Message: msg, LastTransitionTime: metav1.Now()}}}
}

// wantNotCarried fails unless page says the deletion by superseded its
// task before it ran and nothing of it was applied.
func wantNotCarried(t *testing.T, what, page string, by int64) {
	t.Helper()
	wantIn(t, what, page, fmt.Sprintf("Superseded before it ran: sequence %d, locked after it, deletes this deployment", by), "nothing of it was applied")
	if strings.Contains(page, "includes this change") || strings.Contains(page, "already held") || strings.Contains(page, "carried by the newer") {
		t.Errorf("the page of %s says the newer instance holds its change:\n%s", what, page)
	}
}
