package operator

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/intern"
	"github.com/styrmin/styrmin/testcluster"
)

var benchCachedTasks = flag.Int("cached-tasks", 2000, "finished StyrminTasks BenchmarkCachedFinishedTasks creates (a deployment keeps 10)")

// BenchmarkCachedFinishedTasks measures what the agent's cache keeps per
// finished task: the live heap of a cache holding -cached-tasks finished
// tasks of each shape (finishedTask: a webapp update's one step, an
// upgrade's five), with the agent's cache options (cacheOptions:
// finished tasks without their steps) against the same options without
// the task transform (managedFields dropped only), in the same run.
// A deployment keeps ten finished tasks, so at 2,000 deployments the
// agent caches some 20,000 of them once each has changed ten times.
func BenchmarkCachedFinishedTasks(b *testing.B) {
	n := *benchCachedTasks
	c := testcluster.StartT(b, testcluster.Options{})
	ctx := context.Background()
	if err := InstallCRDs(ctx, c.RESTConfig); err != nil {
		b.Fatal(err)
	}
	scheme, err := NewScheme()
	if err != nil {
		b.Fatal(err)
	}
	admin := rest.CopyConfig(c.RESTConfig)
	admin.QPS, admin.Burst = 1000, 2000
	cl, err := client.New(admin, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	for _, shape := range []struct {
		name  string
		steps int
	}{{"update-1-step", 1}, {"upgrade-5-steps", 5}} {
		ns := "bench-" + shape.name
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
		jsonBytes := createFinishedTasks(b, cl, ns, n, shape.steps)
		b.Run(shape.name, func(b *testing.B) {
			perTask := map[string]float64{}
			for b.Loop() {
				for _, v := range []struct {
					name string
					opts cache.Options
				}{{"agent", cacheOptions()}, {"steps-kept", withoutTaskTransform(cacheOptions())}} {
					v.opts.DefaultNamespaces = map[string]cache.Config{ns: {}}
					perTask[v.name] = cachedBytesPerTask(b, admin, scheme, v.opts, n)
				}
			}
			b.ReportMetric(perTask["agent"]/1024, "KiB/task")
			b.ReportMetric(perTask["steps-kept"]/1024, "KiB/task-steps-kept")
			b.ReportMetric(perTask["agent"]/perTask["steps-kept"], "ratio")
			b.ReportMetric(float64(jsonBytes), "json-bytes/task")
			b.Logf("%d finished tasks of %d bytes of JSON: %.1f KiB each as the agent caches them, %.1f KiB with their steps (%.0f against %.0f MiB for 20,000)",
				n, jsonBytes, perTask["agent"]/1024, perTask["steps-kept"]/1024, perTask["agent"]*20000/(1<<20), perTask["steps-kept"]*20000/(1<<20))
		})
	}
}

// createFinishedTasks creates n finished tasks of the given number of
// steps in ns and returns the size of one in JSON.
func createFinishedTasks(b *testing.B, cl client.Client, ns string, n, steps int) int {
	b.Helper()
	ctx := context.Background()
	var jsonBytes int
	sem := make(chan struct{}, 32)
	errs := make(chan error, n)
	for i := range n {
		t := finishedTask(ns, i, steps)
		if i == 0 {
			j, _ := json.Marshal(t)
			jsonBytes = len(j)
		}
		sem <- struct{}{}
		go func() {
			defer func() { <-sem }()
			status := t.Status
			if err := cl.Create(ctx, t); err != nil {
				errs <- err
				return
			}
			t.Status = status
			errs <- cl.Status().Update(ctx, t)
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	return jsonBytes
}

// withoutTaskTransform is opts with tasks cached as every other kind,
// their strings shared as the agent's are: only the trimming differs.
func withoutTaskTransform(opts cache.Options) cache.Options {
	for k := range opts.ByObject {
		if _, ok := k.(*v1alpha1.StyrminTask); ok {
			opts.ByObject[k] = cache.ByObject{Transform: intern.New(0).Transform(cache.TransformStripManagedFields(), &v1alpha1.StyrminTask{})}
		}
	}
	return opts
}

// cachedBytesPerTask starts a cache with opts, syncs its StyrminTask
// informer and returns the live heap it added, per task.
func cachedBytesPerTask(b *testing.B, cfg *rest.Config, scheme *k8sruntime.Scheme, opts cache.Options, n int) float64 {
	b.Helper()
	opts.Scheme = scheme
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	before := liveHeap()
	c, err := cache.New(cfg, opts)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Start(ctx) }()
	if _, err := c.GetInformer(ctx, &v1alpha1.StyrminTask{}); err != nil {
		b.Fatal(err)
	}
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("the cache did not sync")
	}
	var list v1alpha1.StyrminTaskList
	if err := c.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil || len(list.Items) != n {
		b.Fatalf("the cache lists %d tasks (%v), want %d", len(list.Items), err, n)
	}
	list = v1alpha1.StyrminTaskList{}
	after := liveHeap()
	runtime.KeepAlive(c)
	cancel()
	<-done
	return float64(after-before) / float64(n)
}

// liveHeap is the heap in use after a full collection.
func liveHeap() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// finishedTask is the i-th finished task in ns: a webapp update's one
// step (the core step's apply), or with steps > 1 an upgrade with a
// migration (stop, apply, the migration job, start, wait), the shape of
// the graphhub example's.
func finishedTask(ns string, i, steps int) *v1alpha1.StyrminTask {
	at := metav1.NewTime(time.Date(2026, 12, 3, 9, 0, i%60, 0, time.UTC))
	name := fmt.Sprintf("app-%04d", i/10)
	id := v1alpha1.DeploymentID{Cluster: "bench", Environment: "e00", Name: name}
	step := func(hook, mode, action string, k int, args map[string]string, output string) v1alpha1.TaskStep {
		return v1alpha1.TaskStep{
			Name: fmt.Sprintf("%s/%s/%d:%s", hook, mode, k, action), Hook: hook, Mode: mode, Action: action,
			Components: []string{"web"}, Args: args, Timeout: &metav1.Duration{Duration: 5 * time.Minute},
			State: v1alpha1.StepSucceeded, Attempts: 1, Output: output, StartedAt: &at, FinishedAt: &at,
		}
	}
	seq := int64(i%10 + 2)
	t := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", name, seq), Labels: id.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{
			Deployment: id, Namespace: ns, FromSequence: seq - 1, ToSequence: seq,
			Lock:   v1alpha1.LockRef{Commit: "0123456789abcdef0123456789abcdef01234567", Path: "locks/bench/e00/" + name + ".lock.yaml"},
			Target: &v1alpha1.TaskTarget{Kind: "Instance", Driver: v1alpha1.DriverRef{Name: "webapp", Version: "1.2.0"}, AppVersion: "1.25.0", SourceCommit: "89abcdef0123456789abcdef0123456789abcdef", Digest: "sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0"},
		},
	}
	stop := step("upgrade", "pre", "stopComponents", 1, nil, "Deployment/"+name+"-web: 2 → 0")
	stop.Recorded = map[string]string{"Deployment/" + name + "-web": "2"}
	all := []v1alpha1.TaskStep{
		step("update", "core", "upgradeDeploymentVersion", 1, nil, "applied 4 objects: Service/"+name+", Deployment/"+name+"-web, Ingress/"+name+", ServiceAccount/"+name),
	}
	wf := v1alpha1.WorkflowUpdate
	if steps > 1 {
		wf = v1alpha1.WorkflowUpgrade
		all = []v1alpha1.TaskStep{
			stop,
			step("upgrade", "core", "upgradeDeploymentVersion", 1, nil, "applied 5 objects: Service/"+name+", Deployment/"+name+"-web, Ingress/"+name+", ConfigMap/"+name+"-config, ServiceAccount/"+name),
			step("upgrade", "post", "runJob", 1, map[string]string{"job": "migrate", "command": "/app/migrate --to latest"}, "job "+name+"-migrate-"+fmt.Sprint(seq)+" succeeded\nmigrated 3 tables"),
			step("upgrade", "post", "startComponents", 2, nil, "Deployment/"+name+"-web: 0 → 2"),
			step("upgrade", "post", "waitReady", 3, nil, "Deployment/"+name+"-web: 2 of 2 updated and available"),
		}[:steps]
	}
	t.Spec.Workflow = wf
	t.Status = v1alpha1.StyrminTaskStatus{
		Phase: v1alpha1.TaskSucceeded, Workflow: wf, FromSequence: seq - 1, ObservedGeneration: 1,
		Steps: all, CurrentStep: int32(len(all)), StartedAt: &at, FinishedAt: &at,
		Conditions: []metav1.Condition{
			{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: 1, LastTransitionTime: at, Reason: "Succeeded", Message: "every step succeeded"},
			{Type: "Reconciling", Status: metav1.ConditionFalse, ObservedGeneration: 1, LastTransitionTime: at, Reason: "Succeeded", Message: "every step succeeded"},
			{Type: "Stalled", Status: metav1.ConditionFalse, ObservedGeneration: 1, LastTransitionTime: at, Reason: "Succeeded", Message: "every step succeeded"},
		},
	}
	return t
}
