package e2e

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

var (
	agentBenchDeployments = flag.Int("agent-deployments", 500, "webapp deployments BenchmarkAgentThroughGit locks in one commit")
	agentMemoryLimit      = flag.String("agent-memory-limit", "", "the agent's --memory-limit in BenchmarkAgentThroughGit (as in a container with a memory limit; empty: none)")
	agentHeapProfile      = flag.String("agent-heap-profile", "", "file BenchmarkAgentThroughGit writes the agent's heap profile to, taken when its heap in use was highest (for go tool pprof)")
)

// BenchmarkAgentThroughGit measures the whole path at scale: n webapp
// deployments, one namespace each, locked in one commit by `styrminctl
// lock --push`; the agent binary syncs the commit, runs one task per
// deployment and installs each release. Reported: the time from the lock
// commit until every deployment is Ready at its sequence, the same for a
// fan-out that changes one value for all of them, the API server's CPU
// seconds per deployment and the agent's peak resident memory.
// Run with `make bench-agent` (-benchtime 1x).
func BenchmarkAgentThroughGit(b *testing.B) {
	n := *agentBenchDeployments
	for b.Loop() {
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
			files[fmt.Sprintf("clusters/local/environments/bench/deployments/app%04d.cue", i)] = []byte("driver: \"webapp\"\nappVersion: \"1.25.0\"\n")
		}
		e.git.Commit(repoName, fmt.Sprintf("%d webapp deployments", n), files)
		// Readiness is read from a watch: listing 500 StyrminDeployments
		// every second would be a load of its own on the API server being
		// measured.
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		scheme, err := operator.NewScheme()
		if err != nil {
			b.Fatal(err)
		}
		watched, err := cache.New(e.cluster.RESTConfig, cache.Options{Scheme: scheme, ByObject: map[client.Object]cache.ByObject{
			&v1alpha1.StyrminDeployment{}: {Label: labels.SelectorFromSet(labels.Set{v1alpha1.LabelEnvironment: "bench"})},
		}})
		if err != nil {
			b.Fatal(err)
		}
		go func() { _ = watched.Start(ctx) }()
		if _, err := watched.GetInformer(ctx, &v1alpha1.StyrminDeployment{}); err != nil {
			b.Fatal(err)
		}
		if !watched.WaitForCacheSync(ctx) {
			b.Fatal("the StyrminDeployment cache did not sync")
		}
		metricsAddr, pprofAddr := freeAddr(b), freeAddr(b)
		args := []string{"--poll-interval=1s", "--metrics-bind-address=" + metricsAddr, "--pprof-bind-address=" + pprofAddr}
		if *agentMemoryLimit != "" {
			args = append(args, "--memory-limit="+*agentMemoryLimit)
		}
		e.startAgent(b, args...)

		// The agent's heap in use, sampled every second: its highest value
		// (and, with -agent-heap-profile, a profile taken then), and its
		// anonymous resident memory: the process's peak resident set
		// (VmHWM) also counts the pages of its 90 MB of code.
		var peakHeap, peakAnon float64
		sampleHeap := func() {
			peakAnon = max(peakAnon, procStatusMiB(b, e.agent.Pid(), "RssAnon:"))
			h := scrape(b, "http://"+metricsAddr+"/metrics", "go_memstats_heap_inuse_bytes")
			if h <= peakHeap {
				return
			}
			peakHeap = h
			if *agentHeapProfile != "" {
				writeURL(b, "http://"+pprofAddr+"/debug/pprof/heap", *agentHeapProfile)
			}
		}
		run := func(phase string, seq int64) (time.Duration, float64, float64) {
			cpu0 := apiserverCPU(b, cs)
			req0 := scrape(b, "http://"+metricsAddr+"/metrics", "rest_client_requests_total")
			start := time.Now()
			locked, out := e.lockPush(b, clone)
			if len(locked) < n {
				b.Fatalf("%s: locked %d deployments, want at least %d:\n%s", phase, len(locked), n, out)
			}
			deadline := time.Now().Add(30 * time.Minute)
			for {
				ready, err := readyAt(ctx, watched, seq)
				if err != nil {
					b.Fatal(err)
				}
				if ready >= n {
					break
				}
				select {
				case <-e.agent.Done():
					b.Fatalf("%s: the agent exited with %d of %d deployments Ready", phase, ready, n)
				default:
				}
				if time.Now().After(deadline) {
					b.Fatalf("%s: %d of %d deployments Ready at sequence %d after 30 minutes", phase, ready, n, seq)
				}
				sampleHeap()
				time.Sleep(time.Second)
			}
			return time.Since(start), apiserverCPU(b, cs) - cpu0, scrape(b, "http://"+metricsAddr+"/metrics", "rest_client_requests_total") - req0
		}
		create, createCPU, createReqs := run("create", 1)
		e.git.Commit(repoName, "bench: a new message for every deployment",
			map[string][]byte{"clusters/local/environments/bench/environment.cue": []byte("namespacePrefix: \"bench\"\nparameters: message: \"second\"\n")})
		fanout, fanoutCPU, fanoutReqs := run("fan-out", 2)

		b.ReportMetric(create.Seconds(), "create-s")
		b.ReportMetric(fanout.Seconds(), "fanout-s")
		b.ReportMetric(createCPU/float64(n), "create-apiserver-cpu-s/deploy")
		b.ReportMetric(fanoutCPU/float64(n), "fanout-apiserver-cpu-s/deploy")
		b.ReportMetric(createReqs/float64(n), "create-agent-requests/deploy")
		b.ReportMetric(fanoutReqs/float64(n), "fanout-agent-requests/deploy")
		b.ReportMetric(procStatusMiB(b, e.agent.Pid(), "VmHWM:"), "agent-peak-rss-MiB")
		b.ReportMetric(peakAnon, "agent-peak-anon-rss-MiB")
		b.ReportMetric(peakHeap/(1<<20), "agent-peak-heap-inuse-MiB")
	}
}

// freeAddr returns a loopback address with a port free at the time.
func freeAddr(b *testing.B) string {
	b.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
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

// readyAt counts the bench environment's StyrminDeployments that are
// Ready with that active sequence.
func readyAt(ctx context.Context, c client.Reader, seq int64) (int, error) {
	var list v1alpha1.StyrminDeploymentList
	if err := c.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelEnvironment: "bench"}, client.UnsafeDisableDeepCopy); err != nil {
		return 0, err
	}
	n := 0
	for i := range list.Items {
		sd := &list.Items[i]
		if sd.Status.ActiveSequence == seq && apimeta.IsStatusConditionTrue(sd.Status.Conditions, v1alpha1.ConditionReady) {
			n++
		}
	}
	return n, nil
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
