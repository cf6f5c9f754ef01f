package operator_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/testcluster"
)

// The failure tests use the faulty driver (testdata/drivers/faulty): its
// pods carry the local control plane's fault annotation when a parameter
// asks, so a test decides which pods fail, crash or never become ready.

const (
	appNamespace  = "dev-app"
	appDeployment = "clusters/local/environments/dev/deployments/app.cue"
)

// faultyRepo is the faulty driver's versions and an "app" deployment of
// it in dev.
func faultyRepo(t *testing.T) fstest.MapFS {
	t.Helper()
	out := fstest.MapFS{}
	src := os.DirFS("testdata")
	err := fs.WalkDir(src, "drivers", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(src, p)
		out[p] = &fstest.MapFile{Data: b, Mode: 0o644}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	out[appDeployment] = &fstest.MapFile{Data: appConfig("1.0.0", ""), Mode: 0o644}
	return out
}

// appConfig is the app deployment file at an app version, with extra
// parameters (CUE fields, one a line).
func appConfig(version, params string) []byte {
	return fmt.Appendf(nil, "driver:     \"faulty\"\nappVersion: %q\nparameters: {\n%s\n}\n", version, params)
}

func startFaultyEnv(t *testing.T, agentFlags ...string) *agentEnv {
	t.Helper()
	e := startAgentEnvWith(t, faultyRepo(t))
	e.lock(t)
	e.startAgent(t, agentFlags...)
	requireSucceeded(t, e.waitTask(t, appNamespace, "app", 1))
	return e
}

// TestFailedUpgradeThenAConfigurationChangeRunsTheUpgradeHook: an upgrade
// whose migration fails leaves the old version active; the next change
// only changes a parameter, but the active instance is still the old
// version, so its task is an upgrade and runs the upgrade hook again,
// migration Job included, in order (an ordered watch of the workers and
// the Jobs).
func TestFailedUpgradeThenAConfigurationChangeRunsTheUpgradeHook(t *testing.T) {
	t.Parallel()
	e := startFaultyEnv(t)
	stop := e.observe(t, appNamespace, "app-worker")

	failed := e.change(t, "app", "app: 1.1.0, whose migration fails", map[string][]byte{appDeployment: appConfig("1.1.0", `fault: "fail"`)})
	ft := e.waitTask(t, appNamespace, "app", failed)
	if ft.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(ft.Status.Message, "upgrade/pre/3:runJob") || !strings.Contains(ft.Status.Message, "failed") {
		t.Fatalf("app-%d: %s (%s), want Failed in its migration", failed, ft.Status.Phase, ft.Status.Message)
	}
	if sd := e.deployment(t, appNamespace); sd.Spec.Sequence != 1 || sd.Status.ActiveSequence != 1 {
		t.Fatalf("the failed upgrade moved the StyrminDeployment: spec %d active %d", sd.Spec.Sequence, sd.Status.ActiveSequence)
	}

	// Only a parameter changes against the failed lock; against what is
	// active the version still moves.
	next := e.change(t, "app", "app: two workers", map[string][]byte{appDeployment: appConfig("1.1.0", "workers: 2")})
	nt := e.waitTask(t, appNamespace, "app", next)
	requireSucceeded(t, nt)
	if nt.Spec.Workflow != v1alpha1.WorkflowUpdate || nt.Status.Workflow != v1alpha1.WorkflowUpgrade || nt.Status.FromSequence != 1 {
		t.Errorf("app-%d: suggested %s, ran %s from %d; want an update suggested by the locks, an upgrade from the active 1", next, nt.Spec.Workflow, nt.Status.Workflow, nt.Status.FromSequence)
	}
	obs := stop()
	job := fmt.Sprintf("app-migrate-%d", next)
	created := indexOf(obs, "job+ "+job, 0)
	done := indexOf(obs, "job✓ "+job, created+1)
	started := indexOf(obs, "worker=2", done+1)
	if created < 0 || done < 0 || started < 0 {
		t.Fatalf("observed %v; want %s created and complete, then the workers started at 2", obs, job)
	}
	sd := e.deployment(t, appNamespace)
	if sd.Spec.Sequence != next || sd.Status.ActiveSequence != next || sd.Status.AppliedSequence != next || sd.Spec.AppVersion != "1.1.0" {
		t.Errorf("after the second change: spec %d applied %d active %d app %s", sd.Spec.Sequence, sd.Status.AppliedSequence, sd.Status.ActiveSequence, sd.Spec.AppVersion)
	}
}

// TestRetryRunsAFailedUpgradeAgain: an upgrade fails because the
// namespace may run no Job (a quota: the cause is outside git);
// `styrminctl retry --push` locks the same instance with the next
// sequence and a Styrmin-Retry trailer, and once the quota is gone its
// task runs the upgrade's pre steps again and succeeds. A retry of a
// healthy deployment is an update that changes nothing.
func TestRetryRunsAFailedUpgradeAgain(t *testing.T) {
	t.Parallel()
	e := startFaultyEnv(t)
	ctx := context.Background()
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-jobs", Namespace: appNamespace},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{"count/jobs.batch": resource.MustParse("0")}}}
	e.createQuota(t, quota)
	failed := e.change(t, "app", "app: 1.1.0", map[string][]byte{appDeployment: appConfig("1.1.0", "")})
	ft := e.waitTask(t, appNamespace, "app", failed)
	if ft.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(ft.Status.Message, "exceeded quota") {
		t.Fatalf("app-%d: %s (%s), want Failed at its migration, naming the quota", failed, ft.Status.Phase, ft.Status.Message)
	}
	standing := e.standing(t, "app")
	if !standing.Behind || !standing.Failed || !strings.Contains(standing.Reason, "upgrade/pre/3:runJob") {
		t.Errorf("standing after the failure: %+v, want behind, failed, naming the step", standing)
	}
	if err := e.c.Delete(ctx, quota); err != nil {
		t.Fatal(err)
	}

	out := e.ctl(t, "retry", "local/dev/app", "--push")
	retry := failed + 1
	if !strings.Contains(out, fmt.Sprintf("retry locked local/dev/app=%d", retry)) {
		t.Fatalf("styrminctl retry:\n%s", out)
	}
	if tr := e.headTrailer(t, "Styrmin-Retry"); tr != "local/dev/app" {
		t.Errorf("the retry commit's Styrmin-Retry trailer is %q", tr)
	}
	rt := e.waitTask(t, appNamespace, "app", retry)
	requireSucceeded(t, rt)
	if rt.Status.Workflow != v1alpha1.WorkflowUpgrade || rt.Status.FromSequence != 1 {
		t.Errorf("the retry ran %s from %d, want the upgrade from 1", rt.Status.Workflow, rt.Status.FromSequence)
	}
	if got := strings.Join(stepNames(rt), " "); !strings.HasPrefix(got, "1:waitReady=Succeeded 2:stopComponents=Succeeded 3:runJob=Succeeded") {
		t.Errorf("the retry's steps: %s; want the pre steps run again", got)
	}
	if in := e.taskInstance(t, rt); in.Digest != e.taskInstance(t, ft).Digest {
		t.Errorf("the retry locked another instance (%s), want the failed one's", in.Digest)
	}

	// A retry of a healthy deployment: an update, no Job, nothing moves.
	before := e.deployment(t, appNamespace)
	e.ctl(t, "retry", "local/dev/app", "--push")
	noop := e.waitTask(t, appNamespace, "app", retry+1)
	requireSucceeded(t, noop)
	after := e.deployment(t, appNamespace)
	if noop.Status.Workflow != v1alpha1.WorkflowUpdate || after.Spec.Digest != before.Spec.Digest || after.Status.Release.Revision != before.Status.Release.Revision {
		t.Errorf("retry of a healthy deployment: workflow %s, digest %s→%s, revision %d→%d; want an update that changes nothing",
			noop.Status.Workflow, before.Spec.Digest, after.Spec.Digest, before.Status.Release.Revision, after.Status.Release.Revision)
	}
}

// TestTaskFailingInAPostStepLeavesThePreviousInstanceActive upgrades to
// the 1.5 line, whose driver (faulty 2.0.0) verifies the new version with
// an exec after it is applied; pods on fake nodes run no process, so that
// post step fails: the cluster holds the new instance (applied) but the
// previous one stays active, and the deployment is behind git, naming
// the task and the step.
func TestTaskFailingInAPostStepLeavesThePreviousInstanceActive(t *testing.T) {
	t.Parallel()
	e := startFaultyEnv(t)
	seq := e.change(t, "app", "app: 1.5.0", map[string][]byte{appDeployment: appConfig("1.5.0", "")})
	ft := e.waitTask(t, appNamespace, "app", seq)
	if ft.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(ft.Status.Message, "upgrade/post/3:exec") {
		t.Fatalf("app-%d: %s (%s), want Failed in its post exec", seq, ft.Status.Phase, ft.Status.Message)
	}
	sd := e.deployment(t, appNamespace)
	if sd.Spec.Sequence != seq || sd.Status.AppliedSequence != seq || sd.Status.ActiveSequence != 1 || sd.Status.Active == nil || sd.Status.Active.AppVersion != "1.0.0" {
		t.Fatalf("spec %d applied %d active %d (%+v); want %d applied and 1 (1.0.0) active", sd.Spec.Sequence, sd.Status.AppliedSequence, sd.Status.ActiveSequence, sd.Status.Active, seq)
	}
	out := e.ctl(t, "status", "local/dev/app", "--kubeconfig", e.kubeconfig)
	if !strings.Contains(out, fmt.Sprintf("applied %d, active 1", seq)) || !strings.Contains(out, "Behind git:") || !strings.Contains(out, "upgrade/post/3:exec") {
		t.Errorf("styrminctl status does not show the deployment behind, with the step:\n%s", out)
	}
}

// TestARevertAfterAnUpgradeThatFailedAfterItsCoreStepIsAnUpgrade: an
// upgrade to 1.5.0 fails in its post step, the cluster running 1.5.0 with
// 1.0.0 still the active instance. The revert to 1.0.0 was chosen against
// the active instance only: an update, the version changed back without
// the driver's upgrade hooks (no stop, no migration). The workflow is
// chosen against what the StyrminDeployment holds too: an upgrade.
func TestARevertAfterAnUpgradeThatFailedAfterItsCoreStepIsAnUpgrade(t *testing.T) {
	t.Parallel()
	e := startFaultyEnv(t)
	seq := e.change(t, "app", "app: 1.5.0", map[string][]byte{appDeployment: appConfig("1.5.0", "")})
	if ft := e.waitTask(t, appNamespace, "app", seq); ft.Status.Phase != v1alpha1.TaskFailed {
		t.Fatalf("app-%d: %s (%s), want Failed in its post exec", seq, ft.Status.Phase, ft.Status.Message)
	}
	back := e.change(t, "app", "app: back to 1.0.0", map[string][]byte{appDeployment: appConfig("1.0.0", "")})
	rt := e.waitTask(t, appNamespace, "app", back)
	if rt.Status.Workflow != v1alpha1.WorkflowUpgrade || rt.Status.FromSequence != 1 {
		t.Fatalf("the revert app-%d ran %s from %d (%s: %v), want an upgrade from the active 1", back, rt.Status.Workflow, rt.Status.FromSequence, rt.Status.Phase, stepNames(rt))
	}
}

// TestRolloutPastItsProgressDeadlineFailsAtOnce breaks the running app (a
// rollout whose pods never become ready, past a one-second progress
// deadline): the StyrminDeployment reports the workload failed, and the
// next upgrade's first step (waitReady) fails within seconds naming the
// workload and the reason, not at its timeout.
func TestRolloutPastItsProgressDeadlineFailsAtOnce(t *testing.T) {
	// Not parallel: its first step has waited out its 30 s timeout for a
	// driver-evaluation slot of the agent, in a parallel run and once when
	// it ran alone too.
	e := startFaultyEnv(t)
	ctx := context.Background()
	var app appsv1.Deployment
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: appNamespace, Name: "app-app"}, &app); err != nil {
		t.Fatal(err)
	}
	patch := fmt.Sprintf(`{"spec":{"progressDeadlineSeconds":1,"template":{"metadata":{"annotations":{%q:%q}}}}}`, testcluster.FaultAnnotation, testcluster.FaultUnready)
	if err := e.c.Patch(ctx, &app, client.RawPatch(types.StrategicMergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 30*time.Second, "the StyrminDeployment to report the workload failed", func(ctx context.Context) (bool, string, error) {
		sd := e.deployment(t, appNamespace)
		for _, c := range sd.Status.Conditions {
			if c.Type == v1alpha1.ConditionReady {
				return c.Reason == v1alpha1.ReasonWorkloadFailed && strings.Contains(c.Message, "Deployment/app-app"), c.Reason + ": " + c.Message, nil
			}
		}
		return false, "no Ready condition", nil
	})
	// The verdict is seconds older than the task that comes next: its pre
	// step still judges the running instance failed (the verdict is after
	// that instance was applied), as the StyrminDeployment does.
	time.Sleep(2 * time.Second)
	seq := e.change(t, "app", "app: 1.1.0", map[string][]byte{appDeployment: appConfig("1.1.0", "")})
	ft := e.waitTask(t, appNamespace, "app", seq)
	took := ft.Status.FinishedAt.Sub(ft.Status.StartedAt.Time)
	t.Logf("app-%d failed after %s: %s", seq, took, ft.Status.Message)
	if ft.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(ft.Status.Message, "upgrade/pre/1:waitReady") ||
		!strings.Contains(ft.Status.Message, "Deployment/app-app") || !strings.Contains(ft.Status.Message, "ProgressDeadlineExceeded") {
		t.Fatalf("app-%d: %s (%s), want Failed at waitReady naming the workload and the reason", seq, ft.Status.Phase, ft.Status.Message)
	}
	// Not at its timeout: the step failed on the workload's verdict. The
	// time is logged, not bounded (a loaded machine stretches it).
	if strings.Contains(ft.Status.Message, "timed out after") || taskReason(ft) == v1alpha1.ReasonStepTimedOut {
		t.Errorf("waitReady failed at its timeout (after %s), want on the workload's verdict: %s", took, ft.Status.Message)
	}
}

// TestCrashingPodsAppearInTheStatus: workers whose pods crash loop keep a
// change from becoming ready; the StyrminDeployment's status names the
// pods, with CrashLoopBackOff and their restarts, and `styrminctl status`
// shows them.
func TestCrashingPodsAppearInTheStatus(t *testing.T) {
	t.Parallel()
	e := startFaultyEnv(t, "--pod-status-after=1s")
	e.change(t, "app", "app: crashing workers", map[string][]byte{appDeployment: appConfig("1.0.0", `workerFault: "crashloop"`)})
	agenttest.WaitUntil(t, 60*time.Second, "the crashing pods in the StyrminDeployment's status", func(ctx context.Context) (bool, string, error) {
		sd := e.deployment(t, appNamespace)
		for _, c := range sd.Status.Components {
			for _, w := range c.Workloads {
				for _, p := range w.Pods {
					if w.Name == "app-worker" && p.Reason == "CrashLoopBackOff" && p.Restarts > 0 {
						return true, "", nil
					}
				}
			}
		}
		return false, fmt.Sprintf("components %+v", sd.Status.Components), nil
	})
	out := e.ctl(t, "status", "local/dev/app", "--kubeconfig", e.kubeconfig)
	if !strings.Contains(out, "POD NOT READY") || !strings.Contains(out, "CrashLoopBackOff") || !strings.Contains(out, "Deployment/app-worker") {
		t.Errorf("styrminctl status does not show the crashing pods:\n%s", out)
	}
}

// standing is where a deployment of the test's cluster stands.
func (e *agentEnv) standing(t *testing.T, name string) operator.Standing {
	t.Helper()
	all, err := operator.Standings(context.Background(), e.c)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range all {
		if s.ID.Name == name {
			return s
		}
	}
	t.Fatalf("no standing of %s", name)
	return operator.Standing{}
}

// ctl runs styrminctl on a clone of the repository in a folder (pushing
// with the test's token) and returns its output; a failure fails the
// test.
func (e *agentEnv) ctl(t *testing.T, args ...string) string {
	t.Helper()
	dir := path.Join(t.TempDir(), "repo")
	if _, err := gitsource.Clone(context.Background(), e.url, dir, gitsource.CloneOptions{Branch: "main", Auth: gitsource.Auth{Token: agentGitToken}}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(agentBuild.Path(t, "styrminctl"), append([]string{"--repo", dir}, args...)...)
	cmd.Env = append(os.Environ(), "STYRMIN_GIT_TOKEN="+agentGitToken)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("styrminctl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// headTrailer is a trailer of the branch head's commit message.
func (e *agentEnv) headTrailer(t *testing.T, key string) string {
	t.Helper()
	fr, err := e.clone.Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	msg, err := e.clone.Message(fr.Head)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(msg, "\n") {
		if v, ok := strings.CutPrefix(line, key+": "); ok {
			return v
		}
	}
	return ""
}

// TestLockRetryFailedRelocksExactlyTheFailedDeployments: an environment
// change fans out to five deployments; one cannot become ready (a quota
// on its pods), its task fails, the others succeed. `styrminctl lock
// --retry-failed` locks exactly that one again, and once the quota is
// gone its retry succeeds.
func TestLockRetryFailedRelocksExactlyTheFailedDeployments(t *testing.T) {
	t.Parallel()
	repo := faultyRepo(t)
	delete(repo, appDeployment)
	names := []string{"a1", "a2", "a3", "a4", "a5"}
	for _, n := range names {
		repo["clusters/local/environments/dev/deployments/"+n+".cue"] = &fstest.MapFile{Data: appConfig("1.0.0", ""), Mode: 0o644}
	}
	e := startAgentEnvWith(t, repo)
	e.lock(t)
	e.startAgent(t)
	for _, n := range names {
		requireSucceeded(t, e.waitTask(t, "dev-"+n, n, 1))
	}
	ctx := context.Background()
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "two-pods", Namespace: "dev-a3"},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourcePods: resource.MustParse("2")}}}
	e.createQuota(t, quota)
	env := "clusters/local/environments/dev/environment.cue"
	e.commitConfig(t, "dev: two workers everywhere", map[string][]byte{env: []byte("namespacePrefix: \"dev\"\nbackupLocation: \"s3://backups/local/dev\"\nparameters: {logLevel: \"debug\", workers: 2}\n")})
	locked := e.lock(t)
	for _, n := range names {
		if locked[n] != 2 {
			t.Fatalf("the fan-out locked %v, want sequence 2 of each of %v", locked, names)
		}
	}
	for _, n := range names {
		task := e.waitTask(t, "dev-"+n, n, 2)
		if want := v1alpha1.TaskSucceeded; n == "a3" {
			if task.Status.Phase != v1alpha1.TaskFailed {
				t.Fatalf("a3-2: %s (%s), want Failed: its pods do not fit the quota", task.Status.Phase, task.Status.Message)
			}
		} else if task.Status.Phase != want {
			t.Fatalf("%s-2: %s (%s)", n, task.Status.Phase, task.Status.Message)
		}
	}
	// The quota goes first. The ReplicaSet controller retries a pod it
	// could not create with a back-off grown to tens of seconds by now,
	// and watches no quota: a change of each ReplicaSet makes it try at
	// once, as a person's fix would not have to.
	if err := e.c.Delete(ctx, quota); err != nil {
		t.Fatal(err)
	}
	var sets appsv1.ReplicaSetList
	if err := e.c.List(ctx, &sets, client.InNamespace("dev-a3")); err != nil {
		t.Fatal(err)
	}
	for i := range sets.Items {
		nudge := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"annotations":{"example.com/nudge":"quota-removed"}}}`))
		if err := e.c.Patch(ctx, &sets.Items[i], nudge); err != nil {
			t.Fatal(err)
		}
	}
	out := e.ctl(t, "lock", "--retry-failed", "--push", "--kubeconfig", e.kubeconfig)
	if !strings.Contains(out, "locked local/dev/a3=3") || strings.Count(out, "locked local/") != 1 {
		t.Fatalf("lock --retry-failed did not lock exactly a3 again:\n%s", out)
	}
	requireSucceeded(t, e.waitTask(t, "dev-a3", "a3", 3))
}

// createQuota creates a ResourceQuota and waits until the quota
// controller has counted what the namespace uses: only then does the API
// server enforce it.
func (e *agentEnv) createQuota(t *testing.T, q *corev1.ResourceQuota) {
	t.Helper()
	if err := e.c.Create(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 30*time.Second, "quota "+q.Name+" to be counted", func(ctx context.Context) (bool, string, error) {
		var got corev1.ResourceQuota
		if err := e.c.Get(ctx, client.ObjectKeyFromObject(q), &got); err != nil {
			return false, err.Error(), nil
		}
		return len(got.Status.Hard) > 0 && len(got.Status.Used) > 0, fmt.Sprint(got.Status), nil
	})
}

// TestAFailedJobOfTheChartFailsTheChangeAtOnce: a chart that holds a Job
// of its own (not a driver action) is ready only when the Job completed;
// a Job that fails makes the StyrminDeployment report it failed, and the
// task fails at its core step within seconds, naming the Job, instead of
// waiting for its timeout.
func TestAFailedJobOfTheChartFailsTheChangeAtOnce(t *testing.T) {
	// Not parallel; see TestRolloutPastItsProgressDeadlineFailsAtOnce.
	e := startFaultyEnv(t)
	seq := e.change(t, "app", "app: a seed job that fails", map[string][]byte{appDeployment: appConfig("1.0.0", `seedJob: "fail"`)})
	ft := e.waitTask(t, appNamespace, "app", seq)
	took := ft.Status.FinishedAt.Sub(ft.Status.StartedAt.Time)
	t.Logf("app-%d failed after %s: %s", seq, took, ft.Status.Message)
	if ft.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(ft.Status.Message, "update/core/1:upgradeDeploymentVersion") ||
		!strings.Contains(ft.Status.Message, v1alpha1.ReasonWorkloadFailed) || !strings.Contains(ft.Status.Message, "Job/app-seed") {
		t.Fatalf("app-%d: %s (%s), want Failed at its core step naming the failed Job", seq, ft.Status.Phase, ft.Status.Message)
	}
	if strings.Contains(ft.Status.Message, "timed out after") || taskReason(ft) == v1alpha1.ReasonStepTimedOut {
		t.Errorf("the change failed at its core step's timeout (after %s), want on the Job's failure: %s", took, ft.Status.Message)
	}
	if sd := e.deployment(t, appNamespace); sd.Status.ActiveSequence != 1 || sd.Status.AppliedSequence != seq {
		t.Errorf("applied %d active %d; want %d applied, 1 active", sd.Status.AppliedSequence, sd.Status.ActiveSequence, seq)
	}
}

// taskReason is the reason of the task's Ready condition ("" without one).
func taskReason(t *v1alpha1.StyrminTask) string {
	if c := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		return c.Reason
	}
	return ""
}
