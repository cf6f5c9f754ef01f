package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

var agentBenchDeployments = flag.Int("agent-deployments", 500, "webapp deployments BenchmarkAgentThroughGit locks in one commit")

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
		e.startAgent(b, "--poll-interval=1s")

		run := func(phase string, seq int64) (time.Duration, float64) {
			cpu0 := apiserverCPU(b, cs)
			start := time.Now()
			locked, out := e.lockPush(b, clone)
			if len(locked) < n {
				b.Fatalf("%s: locked %d deployments, want at least %d:\n%s", phase, len(locked), n, out)
			}
			// Polled once a second: listing every StyrminDeployment more
			// often would load the API server being measured.
			deadline := time.Now().Add(30 * time.Minute)
			for {
				ready, err := readyAt(context.Background(), e.c, seq)
				if err != nil {
					b.Fatal(err)
				}
				if ready >= n {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("%s: %d of %d deployments Ready at sequence %d after 30 minutes", phase, ready, n, seq)
				}
				time.Sleep(time.Second)
			}
			return time.Since(start), apiserverCPU(b, cs) - cpu0
		}
		create, createCPU := run("create", 1)
		e.git.Commit(repoName, "bench: a new message for every deployment",
			map[string][]byte{"clusters/local/environments/bench/environment.cue": []byte("namespacePrefix: \"bench\"\nparameters: message: \"second\"\n")})
		fanout, fanoutCPU := run("fan-out", 2)

		b.ReportMetric(create.Seconds(), "create-s")
		b.ReportMetric(fanout.Seconds(), "fanout-s")
		b.ReportMetric(createCPU/float64(n), "create-apiserver-cpu-s/deploy")
		b.ReportMetric(fanoutCPU/float64(n), "fanout-apiserver-cpu-s/deploy")
		b.ReportMetric(peakRSSMiB(b, e.agent.cmd.Process.Pid), "agent-peak-rss-MiB")
	}
}

// readyAt counts the bench environment's StyrminDeployments that are
// Ready with that active sequence.
func readyAt(ctx context.Context, c client.Client, seq int64) (int, error) {
	var list v1alpha1.StyrminDeploymentList
	if err := c.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelEnvironment: "bench"}); err != nil {
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

// peakRSSMiB reads a process's peak resident set (VmHWM).
func peakRSSMiB(b *testing.B, pid int) float64 {
	b.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb / 1024
		}
	}
	b.Fatal("no VmHWM in /proc status")
	return 0
}
