package operator_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
)

var (
	benchDeployments = flag.Int("deployments", 100, "deployments of the webapp example BenchmarkDeploymentController installs")
	benchConcurrency = flag.Int("concurrency", 0, "StyrminDeployments reconciled at once in BenchmarkDeploymentController (0: the default)")
	benchBaseline    = flag.Bool("baseline", false, "BenchmarkDeploymentController first applies the same objects directly (no Helm, no agent), to tell the agent's cost from the workloads'")
)

// countingTransport counts the agent's requests to the API server, in
// total and by verb and resource.
type countingTransport struct {
	rt    http.RoundTripper
	calls *atomic.Int64
	mu    *sync.Mutex
	by    map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.calls.Add(1)
	c.mu.Lock()
	c.by[r.Method+" "+resourceOf(r.URL.Path)]++
	c.mu.Unlock()
	return c.rt.RoundTrip(r)
}

// resourceOf reduces a request path to its resource (and subresource).
func resourceOf(p string) string {
	parts := strings.Split(strings.Trim(p, "/"), "/")
	// /api/v1/namespaces/NS/RES/NAME/SUB or /apis/G/V/namespaces/NS/RES/NAME/SUB
	i := 2
	if len(parts) > 0 && parts[0] == "apis" {
		i = 3
	}
	if len(parts) > i+1 && parts[i] == "namespaces" {
		i += 2
	}
	if len(parts) <= i {
		return p
	}
	res := parts[i]
	if len(parts) > i+2 {
		res += "/" + parts[i+2]
	}
	return res
}

// BenchmarkDeploymentController measures the StyrminDeployment controller
// alone on the local control plane: -deployments StyrminDeployments of the
// webapp example (one per namespace) written at once, the time until all
// are Ready, then a change of one value for all of them (a fan-out), timed
// the same way. It reports the agent's API requests per deployment, the API
// server's CPU seconds per deployment and the agent's peak heap.
//
//	go test ./operator -run '^$' -bench DeploymentController -benchtime 1x -deployments 500
func BenchmarkDeploymentController(b *testing.B) {
	n := *benchDeployments
	ctrllog.SetLogger(logr.Discard())
	// Room for every pod (2 per deployment, the baseline's too) and the
	// surge of a rolling update; kwok nodes hold 250 pods each.
	pods := 3 * n
	if *benchBaseline {
		pods += 2 * n
	}
	c := testcluster.StartT(b, testcluster.Options{Workloads: true, Nodes: max(2, pods/250+1)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := operator.InstallCRDs(ctx, c.RESTConfig); err != nil {
		b.Fatal(err)
	}
	ws, err := resolver.LoadWorkspace(os.DirFS("../examples"), resolver.WorkspaceOptions{SourceCommit: "0123456789abcdef0123456789abcdef01234567"})
	if err != nil {
		b.Fatal(err)
	}
	res := ws.Resolve()
	base, ok := res.Get(resolver.ID{Cluster: "local", Environment: "dev", Name: "web"})
	if !ok {
		b.Fatalf("example local/dev/web does not resolve: %v", res.Err())
	}

	var calls atomic.Int64
	var byMu sync.Mutex
	by := map[string]int{}
	agentCfg := rest.CopyConfig(c.RESTConfig)
	agentCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &countingTransport{rt: rt, calls: &calls, mu: &byMu, by: by}
	})
	mgr, err := operator.NewManager(agentCfg, operator.ManagerOptions{
		Drivers:       &driversource.CatalogSource{Catalog: ws.Catalog},
		DriftInterval: 10 * time.Minute,
		Concurrency:   *benchConcurrency,
		Logger:        logr.Discard(),
	})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() { cancel(); <-done }()

	scheme, err := operator.NewScheme()
	if err != nil {
		b.Fatal(err)
	}
	admin := rest.CopyConfig(c.RESTConfig)
	admin.QPS, admin.Burst = 500, 1000
	cl, err := client.New(admin, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(admin)
	if err != nil {
		b.Fatal(err)
	}
	// Readiness is read from watches, so waiting costs the API server
	// nothing per poll: StyrminDeployments from the agent's own cache, the
	// baseline's Deployments from one of their own.
	sds := mgr.GetCache()
	watched, err := cache.New(admin, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&appsv1.Deployment{}: {Label: labels.SelectorFromSet(labels.Set{"app.kubernetes.io/managed-by": "baseline"})},
	}})
	if err != nil {
		b.Fatal(err)
	}
	if *benchBaseline {
		go func() { _ = watched.Start(ctx) }()
		if _, err := watched.GetInformer(ctx, &appsv1.Deployment{}); err != nil {
			b.Fatal(err)
		}
		if !watched.WaitForCacheSync(ctx) {
			b.Fatal("cache did not sync")
		}
	}

	var peakHeap atomic.Uint64
	stopSampling := make(chan struct{})
	var sampler sync.WaitGroup
	sampler.Go(func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-stopSampling:
				return
			case <-t.C:
				runtime.ReadMemStats(&ms)
				if ms.HeapInuse > peakHeap.Load() {
					peakHeap.Store(ms.HeapInuse)
				}
			}
		}
	})

	newInstance := func(round, i int, msg string, seq int64) *resolver.Instance {
		in := *base.Instance
		name := fmt.Sprintf("w%d-%04d", round, i)
		in.ID.Name = name
		in.Sequence = seq
		ctx := *in.Context
		ctx.Deployment.Name, ctx.Deployment.Namespace = name, "bench-"+name
		ctx.Parameters = clone(in.Context.Parameters)
		ctx.Parameters["message"] = msg
		in.Context = &ctx
		in.Values = clone(in.Values)
		in.Values["message"] = msg
		in.Digest, _ = in.ComputeDigest()
		return &in
	}
	phase := func(round int, msg string, seq int64) (time.Duration, int64, float64) {
		cpu0 := apiserverCPU(b, cs)
		calls0 := calls.Load()
		start := time.Now()
		var g errgroup.Group
		g.SetLimit(32)
		for i := range n {
			g.Go(func() error {
				_, err := instance.WriteInstance(ctx, cl, "", newInstance(round, i, msg, seq))
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Minute, false, func(ctx context.Context) (bool, error) {
			var list v1alpha1.StyrminDeploymentList
			if err := sds.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelCluster: "local"}, client.UnsafeDisableDeepCopy); err != nil {
				return false, err
			}
			ready := 0
			for i := range list.Items {
				sd := &list.Items[i]
				if !strings.HasPrefix(sd.Name, fmt.Sprintf("bench-w%d-", round)) {
					continue
				}
				if ok, err := instance.Applied(sd, seq); err != nil {
					return false, err
				} else if ok {
					ready++
				}
			}
			return ready == n, nil
		})
		if err != nil {
			b.Fatal(err)
		}
		return time.Since(start), calls.Load() - calls0, apiserverCPU(b, cs) - cpu0
	}

	if *benchBaseline {
		// The same objects, applied directly with server-side apply and
		// waited for: what any engine costs the API server.
		baseline := func(msg string) (time.Duration, float64) {
			cpu0 := apiserverCPU(b, cs)
			start := time.Now()
			var g errgroup.Group
			g.SetLimit(32)
			for i := range n {
				g.Go(func() error { return applyRendered(ctx, cl, ws, newInstance(0, i, msg, 1)) })
			}
			if err := g.Wait(); err != nil {
				b.Fatal(err)
			}
			err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 30*time.Minute, false, func(ctx context.Context) (bool, error) {
				var list appsv1.DeploymentList
				if err := watched.List(ctx, &list, client.MatchingLabels{"app.kubernetes.io/managed-by": "baseline"}); err != nil {
					return false, err
				}
				ready := 0
				for _, d := range list.Items {
					if d.Status.ObservedGeneration == d.Generation && d.Status.UpdatedReplicas == *d.Spec.Replicas &&
						d.Status.Replicas == d.Status.UpdatedReplicas && d.Status.ReadyReplicas == *d.Spec.Replicas {
						ready++
					}
				}
				return ready == n, nil
			})
			if err != nil {
				b.Fatal(err)
			}
			return time.Since(start), apiserverCPU(b, cs) - cpu0
		}
		createT, createCPU := baseline("Hello from Styrmin")
		fanoutT, fanoutCPU := baseline("Hello again")
		// Reported after b.Loop, which drops metrics reported before it.
		defer func() {
			b.ReportMetric(createT.Seconds(), "baseline-create-s")
			b.ReportMetric(fanoutT.Seconds(), "baseline-fanout-s")
			b.ReportMetric(createCPU/float64(n), "baseline-create-apiserver-cpu-s/deploy")
			b.ReportMetric(fanoutCPU/float64(n), "baseline-fanout-apiserver-cpu-s/deploy")
		}()
	}

	round := 0
	for b.Loop() {
		round++
		create, createCalls, createCPU := phase(round, "Hello from Styrmin", 1)
		fanout, fanoutCalls, fanoutCPU := phase(round, "Hello again", 2)
		b.ReportMetric(create.Seconds(), "create-s")
		b.ReportMetric(fanout.Seconds(), "fanout-s")
		b.ReportMetric(float64(createCalls)/float64(n), "create-calls/deploy")
		b.ReportMetric(float64(fanoutCalls)/float64(n), "fanout-calls/deploy")
		b.ReportMetric(createCPU/float64(n), "create-apiserver-cpu-s/deploy")
		b.ReportMetric(fanoutCPU/float64(n), "fanout-apiserver-cpu-s/deploy")
	}
	if mfs, err := crmetrics.Registry.Gather(); err == nil {
		for _, mf := range mfs {
			switch mf.GetName() {
			case "styrmin_release_apply_duration_seconds", "controller_runtime_reconcile_time_seconds":
				for _, m := range mf.GetMetric() {
					h := m.GetHistogram()
					b.Logf("%s %v: count %d, mean %.3fs", mf.GetName(), m.GetLabel(), h.GetSampleCount(), h.GetSampleSum()/float64(max(1, h.GetSampleCount())))
				}
			}
		}
	}
	byMu.Lock()
	for k, v := range by {
		b.Logf("agent requests %-40s %6.2f per deployment", k, float64(v)/float64(n*round))
	}
	byMu.Unlock()
	close(stopSampling)
	sampler.Wait()
	b.ReportMetric(float64(peakHeap.Load())/(1<<20), "peak-heap-MiB")
}

// apiserverCPU reads the API server's process_cpu_seconds_total.
func apiserverCPU(b *testing.B, cs *kubernetes.Clientset) float64 {
	b.Helper()
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatal("no process_cpu_seconds_total in the API server's metrics")
	return 0
}

// applyRendered renders an instance and applies its objects directly,
// labelled for the baseline.
func applyRendered(ctx context.Context, cl client.Client, ws *resolver.Workspace, in *resolver.Instance) error {
	d, ok := ws.Catalog.Get(in.Driver.Name, in.Driver.Version)
	if !ok {
		return fmt.Errorf("driver %s not found", in.Driver)
	}
	m, err := d.Render(*in.Context, in.Values)
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: in.Context.Deployment.Namespace}}
	if err := cl.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, o := range m.Objects {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(o.YAML, &u.Object); err != nil {
			return err
		}
		labels := u.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels["app.kubernetes.io/managed-by"] = "baseline"
		u.SetLabels(labels)
		if err := cl.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("baseline"), client.ForceOwnership); err != nil {
			return err
		}
	}
	return nil
}
