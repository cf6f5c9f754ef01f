package e2e

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"maps"

	"golang.org/x/sync/errgroup"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/webhook"
	"github.com/styrmin/styrmin/resolver"
)

var (
	agentBenchDeployments = flag.Int("agent-deployments", 500, "webapp deployments BenchmarkAgentThroughGit locks in one commit (without -agent-sizes)")
	agentSizes            = flag.String("agent-sizes", "", "comma-separated deployment counts: BenchmarkAgentThroughGit runs once per size (sub-benchmarks n=N, a fresh control plane each) and logs the series as a markdown table; empty: -agent-deployments alone")
	agentPlot             = flag.String("agent-plot", "", "SVG file BenchmarkAgentThroughGit draws its series into (after every size): API-server CPU and time per deployment against deployments, the agent's and the baseline's; a relative path is relative to e2e/, where go test runs")
	agentChanges          = flag.Int("agent-changes", 0, "after the fan-out, BenchmarkAgentThroughGit restarts the agent with its webhook receiver and a one-hour poll, then changes one deployment at a time this many times (commit, lock, push, signed webhook push), each timed from the delivery until that deployment is Ready; 0: none")
	agentMemoryLimit      = flag.String("agent-memory-limit", "", "the agent's --memory-limit in BenchmarkAgentThroughGit (as in a container with a memory limit; empty: none)")
	agentExtraArgs        = flag.String("agent-args", "", "extra arguments of the agent in BenchmarkAgentThroughGit, space-separated (e.g. \"--kube-api-qps=500 --kube-api-burst=1000\")")
	benchCPUProfile       = flag.String("cpu-profile-prefix", "", "BenchmarkAgentThroughGit saves 40 s CPU profiles of the agent and of the API server, taken at the start of each phase, as PREFIX-{create,fanout}-{agent,apiserver}.pb.gz")
	agentBaseline         = flag.Bool("agent-baseline", false, "BenchmarkAgentThroughGit then stops the agent and applies the same rendered objects directly (server-side apply, no agent, no release records) in other namespaces, created and fanned out the same way: what the workloads cost by themselves, measured in the same run")
	agentBenchWaves       = flag.Int("agent-waves", 0, "BenchmarkAgentThroughGit splits the fan-out into this many health-gated waves (styrmin.cue rollout: waves); 0: none")
	agentHeapProfile      = flag.String("agent-heap-profile", "", "file BenchmarkAgentThroughGit writes the agent's heap profile to, taken when its heap in use was highest (for go tool pprof)")
)

const (
	// benchNamespaces prefixes the namespaces of the bench environment's
	// deployments (namespacePrefix "bench", resolver.NamespaceOf), and
	// baselineNamespaces those of the baseline's copies.
	benchNamespaces    = "bench-"
	baselineNamespaces = "base"
	// webappLabel selects the webapp chart's Deployments, the agent's and
	// the baseline's (which relabels only managed-by): the cache of the
	// benchmark watches no other Deployment.
	webappLabel = "app.kubernetes.io/name"
)

// BenchmarkAgentThroughGit measures the whole path at scale: n webapp
// deployments, one namespace each, locked in one commit by `styrminctl
// lock --push`; the agent binary syncs the commit, runs one task per
// deployment and installs each release. Reported: the time from the lock
// commit until every deployment is Ready at its sequence, the same for a
// fan-out that changes one value for all of them, the API server's CPU
// seconds per deployment and the agent's peak resident memory. A
// deployment is Ready when its StyrminDeployment's Ready condition holds
// at the sequence and its Deployments have rolled out (rolledOut, the
// baseline's check too); the time until each of the two alone is
// reported beside.
//
// Each size of -agent-sizes (else -agent-deployments) is a sub-benchmark
// with a control plane of its own; the series is logged as a markdown
// table and, with -agent-plot, drawn as an SVG. Run with `make
// bench-agent` or `make bench-scale` (-benchtime 1x).
func BenchmarkAgentThroughGit(b *testing.B) {
	sizes, err := parseSizes(*agentSizes, *agentBenchDeployments)
	if err != nil {
		b.Fatal(err)
	}
	if *agentPlot != "" {
		// Refused now rather than after hours of runs (go test runs in
		// e2e/: a relative path is relative to it).
		if _, err := os.Stat(filepath.Dir(*agentPlot)); err != nil {
			b.Fatalf("-agent-plot %s: %v", *agentPlot, err)
		}
	}
	var series []scalePoint
	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				series = append(series, benchAgent(b, n))
			}
		})
		// Drawn after every size: a later one that fails or times out
		// leaves the plot of those before.
		if *agentPlot != "" && len(series) > 0 {
			writePlot(b, *agentPlot, series)
		}
	}
	if len(series) == 0 {
		return // every size failed, or -bench matched none
	}
	b.Logf("cost per deployment against deployments (Ready: workloads and condition; ×base: over the baseline of the same run):\n%s", scaleTable(series))
	if *agentPlot != "" {
		b.Logf("plot written to %s", *agentPlot)
	}
}

// writePlot draws the series into file (writeScaleSVG).
func writePlot(b *testing.B, file string, series []scalePoint) {
	b.Helper()
	var buf bytes.Buffer
	if err := writeScaleSVG(&buf, series); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		b.Fatal(err)
	}
}

// parseSizes reads -agent-sizes ("100,500"), or is the one size def when
// it is empty.
func parseSizes(list string, def int) ([]int, error) {
	if strings.TrimSpace(list) == "" {
		return []int{def}, nil
	}
	var sizes []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("-agent-sizes %q: %q is not a positive number of deployments", list, f)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// benchAgent is one run of BenchmarkAgentThroughGit at n deployments; it
// reports the run's metrics and returns its point of the series.
func benchAgent(b *testing.B, n int) scalePoint {
	// A rolling update runs a new pod beside the old one: room for
	// two pods per deployment and the examples, 250 pods a node.
	e := newEnvWithNodes(b, (2*n+50)/250+1)
	cs, err := kubernetes.NewForConfig(e.cluster.RESTConfig)
	if err != nil {
		b.Fatal(err)
	}
	clone := e.newClone(b)
	files := map[string][]byte{
		"clusters/local/environments/bench/environment.cue": []byte("namespacePrefix: \"bench\"\nparameters: message: \"first\"\n"),
	}
	for i := range n {
		files[benchDeploymentFile(i)] = []byte(benchDeploymentCUE)
	}
	if w := *agentBenchWaves; w > 0 {
		files["styrmin.cue"] = fmt.Appendf(nil, "deletionThreshold: 1\nrollout: {waves: %d, gate: \"ready\"}\n", w)
	}
	e.git.Commit(repoName, fmt.Sprintf("%d webapp deployments", n), files)
	// Readiness is read from a watch: listing 500 StyrminDeployments
	// and Deployments every 250 ms would be a load of its own on the
	// API server being measured.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	scheme, err := operator.NewScheme()
	if err != nil {
		b.Fatal(err)
	}
	watched, err := cache.New(e.cluster.RESTConfig, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
		&v1alpha1.StyrminDeployment{}: {Label: labels.SelectorFromSet(labels.Set{v1alpha1.LabelEnvironment: "bench"})},
		&appsv1.Deployment{}:          {Label: labels.SelectorFromSet(labels.Set{webappLabel: "webapp"})},
	}})
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = watched.Start(ctx) }()
	for _, o := range []client.Object{&v1alpha1.StyrminDeployment{}, &appsv1.Deployment{}} {
		if _, err := watched.GetInformer(ctx, o); err != nil {
			b.Fatal(err)
		}
	}
	if !watched.WaitForCacheSync(ctx) {
		b.Fatal("the StyrminDeployment and Deployment caches did not sync")
	}
	metricsAddr, pprofAddr := agenttest.FreeAddr(b), agenttest.FreeAddr(b)
	// The repository is cloned to disk, as the shipped manifests have it
	// (--clone-dir): in memory the clone's objects, every lock commit's
	// lockfiles, would count in the agent's heap.
	args := []string{"--poll-interval=1s", "--metrics-bind-address=" + metricsAddr, "--pprof-bind-address=" + pprofAddr,
		"--clone-dir=" + filepath.Join(b.TempDir(), "clone")}
	if *agentMemoryLimit != "" {
		args = append(args, "--memory-limit="+*agentMemoryLimit)
	}
	args = append(args, strings.Fields(*agentExtraArgs)...)
	e.startAgent(b, args...)

	// The agent's heap in use, sampled every second: its highest value
	// (and, with -agent-heap-profile, a profile taken then), and its
	// anonymous resident memory: the process's peak resident set
	// (VmHWM) also counts the pages of its 90 MB of code.
	// The driver sandbox's children are processes of their own: in a
	// container they count against the same limit.
	var peakHeap, peakAnon, peakSandbox, peakSandboxAnon float64
	sampleHeap := func() {
		peakAnon = max(peakAnon, procStatusMiB(b, e.agent.Pid(), "RssAnon:"))
		peakSandbox = max(peakSandbox, childrenMiB(b, e.agent.Pid(), "VmRSS:"))
		peakSandboxAnon = max(peakSandboxAnon, childrenMiB(b, e.agent.Pid(), "RssAnon:"))
		h := scrape(b, "http://"+metricsAddr+"/metrics", "go_memstats_heap_inuse_bytes")
		if h <= peakHeap {
			return
		}
		peakHeap = h
		if *agentHeapProfile != "" {
			writeURL(b, "http://"+pprofAddr+"/debug/pprof/heap", *agentHeapProfile)
		}
	}
	type phaseRun struct {
		agentPhase
		agentCPU, agentReqs float64
		// sandboxCPU is the CPU of the agent's driver sandbox children.
		sandboxCPU float64
	}
	run := func(phase string, seq int64) phaseRun {
		// A Deployment counts once it has a generation newer than now:
		// one that is Available at the old one has not rolled out the
		// change yet (the cache may not even have seen it).
		since := generations(ctx, b, watched, benchNamespaces)
		cpu0 := apiserverCPU(b, cs)
		apiReqs0 := apiserverRequests(b, cs)
		procCPU0 := processCPU(b)
		agentCPU0 := scrape(b, "http://"+metricsAddr+"/metrics", "process_cpu_seconds_total")
		sandbox0 := childrenCPU(b, e.agent.Pid())
		req0 := scrape(b, "http://"+metricsAddr+"/metrics", "rest_client_requests_total")
		start := time.Now()
		profiled := profileCPU(b, cs, "http://"+pprofAddr, phase)
		defer func() { <-profiled }()
		locked, out := e.lockPush(b, clone)
		if len(locked) < n {
			b.Fatalf("%s: locked %d deployments, want at least %d:\n%s", phase, len(locked), n, out)
		}
		deadline := time.Now().Add(30 * time.Minute)
		var curve []string
		var res phaseRun
		var sampled time.Time
		// Polled every 250 ms, as the baseline is: the two times have
		// the same resolution.
		for {
			r, err := readyAt(ctx, watched, seq, since)
			if err != nil {
				b.Fatal(err)
			}
			elapsed := time.Since(start)
			if res.condition == 0 && r.condition >= n {
				res.condition = elapsed
			}
			if res.workloads == 0 && r.workloads >= n {
				res.workloads = elapsed
			}
			if s := int(elapsed.Seconds()); s/5 >= len(curve) {
				curve = append(curve, fmt.Sprintf("%ds:%d(%s)", s, r.both, r.waiting))
			}
			if r.both >= n {
				res.ready = elapsed
				break
			}
			select {
			case <-e.agent.Done():
				b.Fatalf("%s: the agent exited with %d of %d deployments Ready", phase, r.both, n)
			default:
			}
			if time.Now().After(deadline) {
				b.Fatalf("%s: %d of %d deployments Ready at sequence %d after 30 minutes (%s)", phase, r.both, n, seq, r.waiting)
			}
			// Every 5 s, as a scraper would rather than every poll: the
			// agent's /metrics holds series per deployment, and serving
			// them each second was a seventh of its CPU at 500.
			if time.Since(sampled) >= 5*time.Second {
				sampleHeap()
				sampled = time.Now()
			}
			time.Sleep(250 * time.Millisecond)
		}
		b.Logf("%s: deployments Ready over time: %s", phase, strings.Join(curve, " "))
		b.Logf("%s: all Ready in %v (workloads rolled out in %v, conditions Ready in %v)", phase,
			res.ready.Round(time.Millisecond), res.workloads.Round(time.Millisecond), res.condition.Round(time.Millisecond))
		logGrowth(b, phase+": %.0f API server requests, by verb and resource:\n", "  %7.0[2]f  %[1]s\n", 0, apiReqs0, apiserverRequests(b, cs))
		logGrowth(b, phase+": %.0f CPU-s by process:", " %s %.1f", 0.5, procCPU0, processCPU(b))
		res.apiserverCPU = apiserverCPU(b, cs) - cpu0
		res.agentCPU = scrape(b, "http://"+metricsAddr+"/metrics", "process_cpu_seconds_total") - agentCPU0
		res.sandboxCPU = childrenCPU(b, e.agent.Pid()) - sandbox0
		res.agentReqs = scrape(b, "http://"+metricsAddr+"/metrics", "rest_client_requests_total") - req0
		return res
	}
	create := run("create", 1)
	e.git.Commit(repoName, "bench: a new message for every deployment",
		map[string][]byte{"clusters/local/environments/bench/environment.cue": []byte("namespacePrefix: \"bench\"\nparameters: message: \"second\"\n")})
	fanout := run("fan-out", 2)
	point := scalePoint{n: n, create: create.agentPhase, fanout: fanout.agentPhase}

	b.ReportMetric(create.ready.Seconds(), "create-s")
	b.ReportMetric(fanout.ready.Seconds(), "fanout-s")
	b.ReportMetric(create.workloads.Seconds(), "create-workloads-s")
	b.ReportMetric(fanout.workloads.Seconds(), "fanout-workloads-s")
	b.ReportMetric(create.condition.Seconds(), "create-condition-s")
	b.ReportMetric(fanout.condition.Seconds(), "fanout-condition-s")
	b.ReportMetric(create.apiserverCPU/float64(n), "create-apiserver-cpu-s/deploy")
	b.ReportMetric(fanout.apiserverCPU/float64(n), "fanout-apiserver-cpu-s/deploy")
	b.ReportMetric(create.agentCPU/float64(n), "create-agent-cpu-s/deploy")
	b.ReportMetric(fanout.agentCPU/float64(n), "fanout-agent-cpu-s/deploy")
	b.ReportMetric(create.sandboxCPU/float64(n), "create-agent-sandbox-cpu-s/deploy")
	b.ReportMetric(fanout.sandboxCPU/float64(n), "fanout-agent-sandbox-cpu-s/deploy")
	b.ReportMetric(create.agentReqs/float64(n), "create-agent-requests/deploy")
	b.ReportMetric(fanout.agentReqs/float64(n), "fanout-agent-requests/deploy")
	logMappings(b, e.agent.Pid())
	b.ReportMetric(procStatusMiB(b, e.agent.Pid(), "VmHWM:"), "agent-peak-rss-MiB")
	b.ReportMetric(peakAnon, "agent-peak-anon-rss-MiB")
	b.ReportMetric(peakSandbox, "agent-sandbox-peak-rss-MiB")
	b.ReportMetric(peakSandboxAnon, "agent-sandbox-peak-anon-rss-MiB")
	b.ReportMetric(peakHeap/(1<<20), "agent-peak-heap-inuse-MiB")
	b.ReportMetric(peakHeap/(1<<10)/float64(n), "agent-peak-heap-inuse-KiB/deploy")
	point.peakRSS, point.peakHeap = procStatusMiB(b, e.agent.Pid(), "VmHWM:"), peakHeap/(1<<20)
	if k := *agentChanges; k > 0 {
		point.changes = changeOneAtATime(b, ctx, e, clone, watched, n, k, args)
		b.ReportMetric(float64(percentile(point.changes, 50).Microseconds())/1000, "change-from-webhook-p50-ms")
		b.ReportMetric(float64(percentile(point.changes, 99).Microseconds())/1000, "change-from-webhook-p99-ms")
		b.ReportMetric(float64(percentile(point.changes, 100).Microseconds())/1000, "change-from-webhook-max-ms")
	}
	if *agentBaseline {
		e.agent.Stop()
		point.hasBaseline = true
		point.baseCreate, point.baseFanout = baselineWorkloads(b, ctx, e, cs, watched)
		// The agent's figures as multiples of the workloads' own, from
		// the same run: the machine's speed drops out.
		b.ReportMetric(create.ready.Seconds()/point.baseCreate.time.Seconds(), "create-time/baseline")
		b.ReportMetric(fanout.ready.Seconds()/point.baseFanout.time.Seconds(), "fanout-time/baseline")
		b.ReportMetric(create.workloads.Seconds()/point.baseCreate.time.Seconds(), "create-workloads-time/baseline")
		b.ReportMetric(fanout.workloads.Seconds()/point.baseFanout.time.Seconds(), "fanout-workloads-time/baseline")
		b.ReportMetric(create.apiserverCPU/point.baseCreate.apiserverCPU, "create-apiserver-cpu/baseline")
		b.ReportMetric(fanout.apiserverCPU/point.baseFanout.apiserverCPU, "fanout-apiserver-cpu/baseline")
		b.Logf("against the baseline: create %s the time (workloads %s), %s the API-server CPU; fan-out %s the time (workloads %s), %s the API-server CPU",
			ratio(create.ready.Seconds(), point.baseCreate.time.Seconds()), ratio(create.workloads.Seconds(), point.baseCreate.time.Seconds()),
			ratio(create.apiserverCPU, point.baseCreate.apiserverCPU),
			ratio(fanout.ready.Seconds(), point.baseFanout.time.Seconds()), ratio(fanout.workloads.Seconds(), point.baseFanout.time.Seconds()),
			ratio(fanout.apiserverCPU, point.baseFanout.apiserverCPU))
	}
	return point
}

// benchDeploymentCUE is a bench deployment's file; benchDeploymentFile
// its path for deployment i, named app0000… (namespace bench-app0000…).
const benchDeploymentCUE = "driver: \"webapp\"\nappVersion: \"1.25.0\"\n"

func benchDeploymentFile(i int) string {
	return fmt.Sprintf("clusters/local/environments/bench/deployments/app%04d.cue", i)
}

// changeOneAtATime is "one change in a busy cluster": with the n
// deployments Ready, it restarts the agent (args, as it ran) with its
// webhook receiver and a one-hour poll, so that a sync comes from the
// webhook and not from polling. Then, changes times, it gives one
// deployment a message of its own, locks and pushes the commit as a user
// would, delivers the signed GitHub push event and times from the
// delivery until that deployment is Ready at the new sequence (its
// Deployment rolled out at a newer generation, its condition Ready). The
// lock runs before the clock starts: it loads the whole repository,
// which costs the user's machine, not the cluster, and the webhook is
// what a git host sends once the push is in.
func changeOneAtATime(b *testing.B, ctx context.Context, e *env, clone string, watched cache.Cache, n, changes int, args []string) []time.Duration {
	e.agent.Stop()
	e.createSecret(b, webhookSecretName, map[string][]byte{operator.DefaultWebhookSecretKey: []byte(webhookSecret)})
	hookAddr := agenttest.FreeAddr(b)
	metricsAddr := ""
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--metrics-bind-address="); ok {
			metricsAddr = v
		}
	}
	e.startAgent(b, append(slices.Clone(args), "--poll-interval=1h", "--webhook-bind-address="+hookAddr, "--webhook-secret-name="+webhookSecretName)...)
	settled := time.Now()
	waitListening(b, e, hookAddr)
	e.waitSynced(b)
	waitQuiet(b, e, "http://"+metricsAddr+"/metrics")
	b.Logf("changes: the restarted agent settled in %v", time.Since(settled).Round(time.Millisecond))

	url := "http://" + hookAddr + "/"
	step := max(1, n/changes)
	var took []time.Duration
	var lockTook []time.Duration
	for k := range changes {
		i := (k * step) % n
		name := fmt.Sprintf("app%04d", i)
		ns := benchNamespaces + name
		e.git.Commit(repoName, fmt.Sprintf("bench: change %d of %s", k, name),
			map[string][]byte{benchDeploymentFile(i): fmt.Appendf(nil, "%sparameters: message: \"change %d\"\n", benchDeploymentCUE, k)})
		since := generations(ctx, b, watched, ns)
		lockStart := time.Now()
		locked, out := e.lockPush(b, clone)
		lockTook = append(lockTook, time.Since(lockStart))
		seq := locked["local/bench/"+name]
		if len(locked) != 1 || seq == 0 {
			b.Fatalf("change %d: locked %v, want local/bench/%s alone:\n%s", k, locked, name, out)
		}
		head := e.git.Head(repoName, "main")
		body := fmt.Sprintf(`{"ref":"refs/heads/main","after":%q,"repository":{"full_name":"acme/desired"}}`, head)
		start := time.Now()
		if code := agenttest.Deliver(b, url, "push", fmt.Sprintf("bench-change-%d", k), webhook.Sign([]byte(webhookSecret), []byte(body)), body); code != http.StatusAccepted {
			b.Fatalf("change %d: signed push: status %d, want 202", k, code)
		}
		for {
			// One namespace's objects: the cache's namespace index makes
			// this cheap enough to poll every 10 ms.
			r, err := readyAt(ctx, watched, seq, since, client.InNamespace(ns))
			if err != nil {
				b.Fatal(err)
			}
			if r.both == 1 {
				break
			}
			if time.Since(start) > 5*time.Minute {
				b.Fatalf("change %d: %s not Ready at sequence %d 5 minutes after the webhook (%s)", k, name, seq, r.waiting)
			}
			select {
			case <-e.agent.Done():
				b.Fatalf("change %d: the agent exited", k)
			default:
			}
			time.Sleep(10 * time.Millisecond)
		}
		took = append(took, time.Since(start))
		b.Logf("change %d: %s at sequence %d Ready %v after the webhook delivery (lock and push took %v)",
			k, name, seq, took[k].Round(time.Millisecond), lockTook[k].Round(time.Millisecond))
	}
	b.ReportMetric(percentile(lockTook, 50).Seconds(), "change-lock-push-p50-s")
	return took
}

// waitListening waits until the agent's webhook receiver accepts
// connections.
func waitListening(b *testing.B, e *env, addr string) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-e.agent.Done():
			b.Fatalf("the agent exited before its webhook receiver listened: %s", e.agent.ExitState())
		default:
		}
		if time.Now().After(deadline) {
			b.Fatalf("the webhook receiver at %s did not listen within a minute: %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitQuiet waits until the agent's API requests (rest_client_requests_total
// at its metrics endpoint) have grown by at most 5 over each of 3
// seconds in a row: the work of its start (one pass over every
// deployment) is done and does not overlap the first changes, while its
// lease renewals may go on.
func waitQuiet(b *testing.B, e *env, metrics string) {
	b.Helper()
	deadline := time.Now().Add(5 * time.Minute)
	last, quiet := scrape(b, metrics, "rest_client_requests_total"), 0
	for quiet < 3 {
		time.Sleep(time.Second)
		now := scrape(b, metrics, "rest_client_requests_total")
		if now-last <= 5 {
			quiet++
		} else {
			quiet = 0
		}
		if time.Now().After(deadline) {
			// Not fatal: the changes are still measured, in a cluster
			// busier than intended, and the log says so.
			b.Logf("changes: the restarted agent still makes %.0f API requests a second after 5 minutes; measuring anyway", now-last)
			return
		}
		last = now
	}
}

// profileCPU saves, with -cpu-profile-prefix, 40 s CPU profiles of the
// agent (served at pprof) and of the API server, in the background; the
// channel is closed when both are saved.
func profileCPU(b *testing.B, cs *kubernetes.Clientset, pprof, phase string) <-chan struct{} {
	done := make(chan struct{})
	if *benchCPUProfile == "" {
		close(done)
		return done
	}
	phase = strings.ReplaceAll(phase, "-", "")
	var apiserver []byte
	var apiserverErr error
	go func() {
		apiserver, apiserverErr = cs.RESTClient().Get().AbsPath("/debug/pprof/profile").Param("seconds", "40").Timeout(time.Minute).DoRaw(context.Background())
		done <- struct{}{}
	}()
	out := make(chan struct{})
	go func() {
		defer close(out)
		agent, agentErr := http.Get(pprof + "/debug/pprof/profile?seconds=40") //nolint:noctx // a test on loopback
		<-done
		if agentErr != nil || apiserverErr != nil {
			b.Errorf("cpu profiles: agent: %v; API server: %v", agentErr, apiserverErr)
			return
		}
		defer agent.Body.Close()
		raw, err := io.ReadAll(agent.Body)
		if err == nil {
			err = os.WriteFile(*benchCPUProfile+"-"+phase+"-agent.pb.gz", raw, 0o644)
		}
		if err == nil {
			err = os.WriteFile(*benchCPUProfile+"-"+phase+"-apiserver.pb.gz", apiserver, 0o644)
		}
		if err != nil {
			b.Error(err)
		}
	}()
	return out
}

// baselineLabel marks the objects baselineWorkloads applies.
const baselineLabel = "app.kubernetes.io/managed-by"

// baselineWorkloads applies the objects the agent applied, rendered from
// the same lockfiles, directly with server-side apply, 32 at a time, in
// namespaces of their own; then changes the message of all of them, as
// the fan-out did. Each is timed until every Deployment has rolled out
// (rolledOut, as the agent's phases), with the API server's CPU: what any
// engine's workloads cost.
func baselineWorkloads(b *testing.B, ctx context.Context, e *env, cs *kubernetes.Clientset, watched cache.Cache) (create, fanout baselinePhase) {
	b.Helper()
	repo, err := gitsource.Clone(ctx, e.url, "", gitsource.CloneOptions{Branch: "main", Auth: gitsource.Auth{Token: gitToken}})
	if err != nil {
		b.Fatal(err)
	}
	head, err := repo.Head()
	if err != nil {
		b.Fatal(err)
	}
	tree, err := repo.FS(head)
	if err != nil {
		b.Fatal(err)
	}
	ws, err := resolver.LoadWorkspace(tree, resolver.WorkspaceOptions{})
	if err != nil {
		b.Fatal(err)
	}
	var instances []*resolver.Instance
	for id, in := range ws.Locks {
		if id.Environment == "bench" {
			instances = append(instances, in)
		}
	}
	n := len(instances)
	if n == 0 {
		b.Fatalf("baseline: no lockfile of the bench environment in the clone (%d locks)", len(ws.Locks))
	}
	run := func(phase, message string) baselinePhase {
		// As in the agent's phases: a Deployment still Available at its
		// generation of before the phase has not rolled out the change.
		since := generations(ctx, b, watched, baselineNamespaces)
		cpu0 := apiserverCPU(b, cs)
		procCPU0 := processCPU(b)
		apiReqs0 := apiserverRequests(b, cs)
		start := time.Now()
		var g errgroup.Group
		g.SetLimit(32)
		for i, in := range instances {
			g.Go(func() error {
				return applyDirectly(ctx, e.c, ws.Catalog, in, fmt.Sprintf("%s%04d", baselineNamespaces, i), message)
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		for {
			var list appsv1.DeploymentList
			if err := watched.List(ctx, &list, client.MatchingLabels{baselineLabel: "baseline"}, client.UnsafeDisableDeepCopy); err != nil {
				b.Fatal(err)
			}
			ready := 0
			for i := range list.Items {
				d := &list.Items[i]
				if strings.HasPrefix(d.Namespace, baselineNamespaces) && rolledOut(d, since[d.Namespace+"/"+d.Name]) {
					ready++
				}
			}
			if ready >= n {
				break
			}
			if time.Since(start) > 30*time.Minute {
				b.Fatalf("%s: %d of %d deployments rolled out after 30 minutes", phase, ready, n)
			}
			time.Sleep(250 * time.Millisecond)
		}
		// The same count as the agent's phases, to compare resource by
		// resource what the workloads themselves cost.
		logGrowth(b, phase+": %.0f API server requests, by verb and resource:\n", "  %7.0[2]f  %[1]s\n", 0, apiReqs0, apiserverRequests(b, cs))
		logGrowth(b, phase+": %.0f CPU-s by process:", " %s %.1f", 0.5, procCPU0, processCPU(b))
		return baselinePhase{time: time.Since(start), apiserverCPU: apiserverCPU(b, cs) - cpu0}
	}
	create = run("baseline create", "")
	fanout = run("baseline fan-out", "third")
	b.ReportMetric(create.time.Seconds(), "baseline-create-s")
	b.ReportMetric(fanout.time.Seconds(), "baseline-fanout-s")
	b.ReportMetric(create.apiserverCPU/float64(n), "baseline-create-apiserver-cpu-s/deploy")
	b.ReportMetric(fanout.apiserverCPU/float64(n), "baseline-fanout-apiserver-cpu-s/deploy")
	return create, fanout
}

// rolledOut tells whether a Deployment has rolled out a generation newer
// than since, as `kubectl rollout status` and the agent's readiness
// decide: the controller has observed that generation, every replica is
// updated, no old one is left and all are available. since is the
// generation it had before the change (0 for a new one): one Available at
// that generation has not rolled out the change yet.
func rolledOut(d *appsv1.Deployment, since int64) bool {
	want := int32(1) // the API's default
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	return d.Generation > since && d.Status.ObservedGeneration == d.Generation &&
		d.Status.UpdatedReplicas == want && d.Status.Replicas == d.Status.UpdatedReplicas &&
		d.Status.AvailableReplicas == want
}

// generations are the generations of the watched Deployments in
// namespaces starting with prefix, by namespace/name: a phase's since.
func generations(ctx context.Context, b *testing.B, c client.Reader, prefix string) map[string]int64 {
	b.Helper()
	var list appsv1.DeploymentList
	if err := c.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	for _, d := range list.Items {
		if strings.HasPrefix(d.Namespace, prefix) {
			out[d.Namespace+"/"+d.Name] = d.Generation
		}
	}
	return out
}

// applyDirectly renders a locked instance into namespace ns (message, when
// set, replacing its message value) and applies its objects.
func applyDirectly(ctx context.Context, c client.Client, catalog *drivers.Catalog, in *resolver.Instance, ns, message string) error {
	d, ok := catalog.Get(in.Driver.Name, in.Driver.Version)
	if !ok {
		return fmt.Errorf("driver %s not in the catalog", in.Driver)
	}
	dctx := *in.Context
	dctx.Deployment.Namespace = ns
	values := maps.Clone(in.Values)
	if message != "" {
		values["message"] = message
	}
	m, err := d.Render(dctx, values)
	if err != nil {
		return err
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	for _, o := range m.Objects {
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(o.YAML, &u.Object); err != nil {
			return err
		}
		u.SetNamespace(ns)
		l := u.GetLabels()
		if l == nil {
			l = map[string]string{}
		}
		l[baselineLabel] = "baseline"
		u.SetLabels(l)
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner("baseline"), client.ForceOwnership); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", u.GetKind(), ns, u.GetName(), err)
		}
	}
	return nil
}

// scrape sums a metric's samples (all label sets) on a Prometheus
// endpoint.
func scrape(b *testing.B, url, metric string) float64 {
	b.Helper()
	raw := get(b, url)
	sum, found := 0.0, false
	for _, line := range strings.Split(string(raw), "\n") {
		rest, ok := strings.CutPrefix(line, metric)
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		f, err := strconv.ParseFloat(rest[strings.LastIndexByte(rest, ' ')+1:], 64)
		if err != nil {
			b.Fatalf("%s: %q: %v", url, line, err)
		}
		sum, found = sum+f, true
	}
	if !found {
		b.Fatalf("%s has no %s", url, metric)
	}
	return sum
}

// writeURL saves what url answers in file.
func writeURL(b *testing.B, url, file string) {
	b.Helper()
	if err := os.WriteFile(file, get(b, url), 0o644); err != nil {
		b.Fatal(err)
	}
}

// get reads url, waiting up to 10 s for a server that is starting.
func get(b *testing.B, url string) []byte {
	b.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(url) //nolint:noctx // a test on loopback
		if err == nil {
			defer resp.Body.Close()
			raw, err := io.ReadAll(resp.Body)
			if err != nil {
				b.Fatal(err)
			}
			return raw
		}
		if time.Now().After(deadline) {
			b.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// readiness counts the bench deployments Ready at a sequence: by their
// StyrminDeployment's Ready condition, by their workloads (every
// Deployment of the namespace rolled out, at least one) and by both, the
// benchmark's Ready; waiting tallies why the others are not.
type readiness struct {
	condition, workloads, both int
	waiting                    string
}

// readyAt reads the bench environment's StyrminDeployments (opts: of
// one namespace) and their namespaces' Deployments, each of which must
// have rolled out a generation newer than since's.
func readyAt(ctx context.Context, c client.Reader, seq int64, since map[string]int64, opts ...client.ListOption) (readiness, error) {
	var list v1alpha1.StyrminDeploymentList
	if err := c.List(ctx, &list, append([]client.ListOption{client.MatchingLabels{v1alpha1.LabelEnvironment: "bench"}, client.UnsafeDisableDeepCopy}, opts...)...); err != nil {
		return readiness{}, err
	}
	var deps appsv1.DeploymentList
	if err := c.List(ctx, &deps, append([]client.ListOption{client.UnsafeDisableDeepCopy}, opts...)...); err != nil {
		return readiness{}, err
	}
	return countReady(list.Items, deps.Items, seq, since), nil
}

// countReady is readyAt's count over the listed StyrminDeployments and
// Deployments (those outside the bench namespaces are ignored).
func countReady(sds []v1alpha1.StyrminDeployment, deps []appsv1.Deployment, seq int64, since map[string]int64) readiness {
	// Per namespace: true when every Deployment has rolled out.
	rolled := map[string]bool{}
	for i := range deps {
		d := &deps[i]
		if !strings.HasPrefix(d.Namespace, benchNamespaces) {
			continue
		}
		ok, seen := rolled[d.Namespace]
		rolled[d.Namespace] = (ok || !seen) && rolledOut(d, since[d.Namespace+"/"+d.Name])
	}
	var r readiness
	waiting := map[string]int{}
	for i := range sds {
		sd := &sds[i]
		ready := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady)
		condition := sd.Status.ActiveSequence == seq && ready != nil && ready.Status == metav1.ConditionTrue
		workloads := rolled[sd.Namespace]
		if condition {
			r.condition++
		}
		if workloads {
			r.workloads++
		}
		switch {
		case condition && workloads:
			r.both++
		case condition:
			waiting["workloads rolling out"]++
		case sd.Spec.Sequence < seq:
			// No task has started this change's step yet (the tasks may
			// exist: a fan-out's are made within seconds).
			waiting["instance not written"]++
		case sd.Status.ActiveSequence < seq:
			waiting["not active"]++
		case ready != nil:
			waiting[ready.Reason]++
		}
	}
	var parts []string
	for k, v := range waiting {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	r.waiting = strings.Join(parts, ",")
	return r
}

// processes by command name, from /proc: the control plane's parts, the
// agent and this test, which share the machine's cores.
func processCPU(b *testing.B) map[string]float64 {
	b.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]float64{}
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		raw, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // exited
		}
		// pid (comm) state ppid … utime stime cutime cstime are fields
		// 14 to 17.
		open, close := strings.IndexByte(string(raw), '('), strings.LastIndexByte(string(raw), ')')
		if open < 0 || close < open {
			continue
		}
		f := strings.Fields(string(raw[close+1:]))
		if len(f) < 13 {
			continue
		}
		// With the children it has waited for (cutime, cstime): the
		// agent's driver sandbox children, live ones being counted as
		// processes of their own.
		var sum float64
		for _, i := range []int{11, 12, 13, 14} {
			v, _ := strconv.ParseFloat(f[i], 64)
			sum += v
		}
		out[string(raw[open+1:close])] += sum / 100 // USER_HZ
	}
	return out
}

// logGrowth logs (with -v) the keys whose counts grew by at least least
// from before to after, most first: header gets the total, row each key
// and its growth.
func logGrowth(b *testing.B, header, row string, least float64, before, after map[string]float64) {
	b.Helper()
	rows, total := grown(before, after, least)
	var sb strings.Builder
	fmt.Fprintf(&sb, header, total)
	for _, r := range rows {
		fmt.Fprintf(&sb, row, r.key, r.n)
	}
	b.Log(sb.String())
}

// growth is how much one key's count grew over a phase.
type growth struct {
	key string
	n   float64
}

// grown returns the keys whose counts grew by at least least from before
// to after, most first (then by key), and the total growth.
func grown(before, after map[string]float64, least float64) ([]growth, float64) {
	var rows []growth
	total := 0.0
	for k, v := range after {
		if d := v - before[k]; d > 0 && d >= least {
			rows = append(rows, growth{k, d})
			total += d
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		return rows[i].n > rows[j].n || rows[i].n == rows[j].n && rows[i].key < rows[j].key
	})
	return rows, total
}

// apiserverRequests counts the API server's requests by verb and
// resource (apiserver_request_total), from every client.
func apiserverRequests(b *testing.B, cs *kubernetes.Clientset) map[string]float64 {
	b.Helper()
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	counts := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		rest, ok := strings.CutPrefix(line, "apiserver_request_total{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		var verb, resource, sub string
		for _, kv := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(kv, "=")
			v = strings.Trim(v, `"`)
			switch k {
			case "verb":
				verb = v
			case "resource":
				resource = v
			case "subresource":
				sub = v
			}
		}
		if sub != "" {
			resource += "/" + sub
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
		if err != nil {
			b.Fatalf("apiserver_request_total: %q: %v", line, err)
		}
		counts[verb+" "+resource] += f
	}
	return counts
}

// childrenCPU is the CPU seconds of pid's children, the agent's driver
// sandboxes: those it has waited for (cutime and cstime in its /proc
// stat) and those still running (a child serves many renders and ends
// when idle). A child running at both readings counts what it used in
// between; one that ended in between, what it used after the first.
func childrenCPU(b *testing.B, pid int) float64 {
	b.Helper()
	f := procStat(fmt.Sprintf("/proc/%d/stat", pid))
	if len(f) < 15 {
		b.Fatalf("/proc/%d/stat: %q", pid, f)
	}
	sum := statSeconds(f, 13, 14)
	for _, c := range childPIDs(b, pid) {
		if st := procStat("/proc/" + strconv.Itoa(c) + "/stat"); len(st) > 12 {
			sum += statSeconds(st, 11, 12)
		}
	}
	return sum
}

// childPIDs are the processes whose parent is pid.
func childPIDs(b *testing.B, pid int) []int {
	b.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		b.Fatal(err)
	}
	parent := strconv.Itoa(pid)
	var pids []int
	for _, e := range entries {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if st := procStat("/proc/" + e.Name() + "/stat"); len(st) > 1 && st[1] == parent {
			pids = append(pids, c)
		}
	}
	return pids
}

// childrenMiB is a size from the /proc status of pid's children, summed
// (VmRSS: resident; RssAnon: resident and not a file's, what a container
// is charged for each, the binary's pages being shared with the agent).
func childrenMiB(b *testing.B, pid int, field string) float64 {
	b.Helper()
	var sum float64
	for _, c := range childPIDs(b, pid) {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", c))
		if err != nil {
			continue // ended
		}
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, field); ok {
				kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				sum += kb / 1024
			}
		}
	}
	return sum
}

// procStat returns the fields of a /proc stat file after the command's
// name (the state first), nil if the process is gone.
func procStat(path string) []string {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
}

// statSeconds sums the clock-tick fields at idx of a procStat, in seconds.
func statSeconds(f []string, idx ...int) float64 {
	var sum float64
	for _, i := range idx {
		v, _ := strconv.ParseFloat(f[i], 64)
		sum += v
	}
	return sum / 100 // USER_HZ
}

// apiserverCPU reads the API server's process_cpu_seconds_total.
func apiserverCPU(b *testing.B, cs *kubernetes.Clientset) float64 {
	b.Helper()
	raw, err := cs.RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "process_cpu_seconds_total "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				b.Fatal(err)
			}
			return f
		}
	}
	b.Fatal("the API server's /metrics has no process_cpu_seconds_total")
	return 0
}

// logMappings logs (with -v) the process's resident memory by mapping:
// its binary's sections (code, read-only data, pclntab) and its heap.
func logMappings(b *testing.B, pid int) {
	b.Helper()
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	var head string
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && strings.Contains(f[0], "-") {
			head = line
			continue
		}
		if len(f) == 3 && (f[0] == "Rss:" || f[0] == "Anonymous:") && f[1] != "0" {
			kb, _ := strconv.Atoi(f[1])
			if kb >= 1024 {
				fmt.Fprintf(&sb, "  %-10s %6.1f MiB  %s\n", f[0], float64(kb)/1024, head)
			}
		}
	}
	b.Logf("agent resident memory by mapping (1 MiB or more):\n%s", sb.String())
}

// procStatusMiB reads a size from a process's /proc status: VmHWM is its
// peak resident set, RssAnon its anonymous resident memory now.
func procStatusMiB(b *testing.B, pid int, field string) float64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Fatalf("no %s in /proc status", field)
	return 0
}
