package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

const (
	waveDeployments = 40
	waveCount       = 4
	wavePause       = 2 * time.Second
	// waveFailing is the deployment of wave 2 whose fan-out fails.
	waveFailing = "w12"
)

func waveName(i int) string { return fmt.Sprintf("w%02d", i) }

func waveFile(name string) string {
	return "clusters/local/environments/dev/deployments/" + name + ".cue"
}

// waveCluster is the cluster file; logFormat is what the fan-out changes.
func waveCluster(logFormat string) []byte {
	return fmt.Appendf(nil, "domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\nconfig: logFormat: %q\nparameters: workers: 0\n", logFormat)
}

// TestFanOutInWavesStopsAtAFailedWaveAndAFixCommitCompletesIt runs a
// cluster fan-out over 40 deployments in 4 waves (styrmin.cue rollout,
// a 2 s pause) with one deployment of wave 2 failing: wave 2 starts only
// the pause after wave 1 is Ready; waves 3 and 4 do not start, their
// tasks wait saying why and `styrminctl status` shows it; the agent
// killed and restarted meanwhile keeps them waiting; a fix commit of the
// failed deployment lets wave 3, then wave 4, run, each after the wave
// before ended.
func TestFanOutInWavesStopsAtAFailedWaveAndAFixCommitCompletesIt(t *testing.T) {
	t.Parallel()
	repo := faultyRepo(t)
	repo[appDeployment] = nil
	repo[webDeployment] = nil
	repo[hubDeployment] = nil
	repo["styrmin.cue"] = &fstest.MapFile{Data: []byte("rollout: {waves: 4, gate: \"ready\", pause: \"2s\"}\n"), Mode: 0o644}
	repo["clusters/local/cluster.cue"] = &fstest.MapFile{Data: waveCluster("json"), Mode: 0o644}
	for i := range waveDeployments {
		repo[waveFile(waveName(i))] = &fstest.MapFile{Data: appConfig("1.0.0", ""), Mode: 0o644}
	}
	e := startAgentEnvWith(t, repo)
	if got := len(e.lock(t)); got != waveDeployments {
		t.Fatalf("locked %d deployments, want %d", got, waveDeployments)
	}
	e.startAgent(t)
	for i := range waveDeployments {
		requireSucceeded(t, e.waitTask(t, "dev-"+waveName(i), waveName(i), 1))
	}

	t.Log("the fan-out: every deployment, and wave 2's " + waveFailing + " made to fail")
	e.commitConfig(t, "cluster: log format text; "+waveFailing+" unready", map[string][]byte{
		"clusters/local/cluster.cue": waveCluster("text"),
		waveFile(waveFailing):        appConfig("1.0.0", `fault: "unready"`+"\nprogressDeadline: 1"),
	})
	locked := e.lock(t)
	if len(locked) != waveDeployments {
		t.Fatalf("the fan-out locked %d deployments, want %d", len(locked), waveDeployments)
	}
	wave := func(i int) int { return i/(waveDeployments/waveCount) + 1 }
	for i := range waveDeployments {
		if wave(i) > 2 {
			continue
		}
		task := e.waitTask(t, "dev-"+waveName(i), waveName(i), 2)
		if waveName(i) == waveFailing {
			if task.Status.Phase != v1alpha1.TaskFailed {
				t.Fatalf("%s: %s, want Failed", task.Name, task.Status.Phase)
			}
			continue
		}
		requireSucceeded(t, task)
	}
	w1End, w2Start := lastEnd(t, e, 0, 10), firstStart(t, e, 10, 20)
	if w2Start.Before(w1End.Add(wavePause - time.Second)) { // times are kept to the second
		t.Errorf("wave 2 started at %v, before wave 1's end %v and the %v pause", w2Start, w1End, wavePause)
	}

	waitWaiting := func(why string) {
		t.Helper()
		for i := 20; i < waveDeployments; i++ {
			name := waveName(i)
			want := fmt.Sprintf("wave %d of 4: waiting for wave %d to succeed and be Ready", wave(i), wave(i)-1)
			if wave(i) == 3 {
				want = "wave 3 of 4: waiting for local/dev/" + waveFailing + "@2: its task " + waveFailing + "-2 failed"
			}
			key := client.ObjectKey{Namespace: "dev-" + name, Name: v1alpha1.TaskName(name, 2)}
			agenttest.WaitUntil(t, agentWaitLimit, key.Name+" to wait "+why, func(ctx context.Context) (bool, string, error) {
				var task v1alpha1.StyrminTask
				if err := e.c.Get(ctx, key, &task); err != nil {
					return false, err.Error(), nil
				}
				if task.Status.Phase != v1alpha1.TaskPending {
					t.Fatalf("%s is %s while the wave before has failed", key.Name, task.Status.Phase)
				}
				for _, s := range task.Status.Steps {
					if s.StartedAt != nil {
						t.Fatalf("%s started step %s while the wave before has failed", key.Name, s.Name)
					}
				}
				c := apimeta.FindStatusCondition(task.Status.Conditions, v1alpha1.ConditionReady)
				if c == nil || c.Reason != v1alpha1.ReasonWaitingForOrder || !strings.Contains(c.Message, want) {
					return false, fmt.Sprint(c), nil
				}
				return true, "", nil
			})
		}
	}
	waitWaiting("for the failed wave")
	status := e.ctl(t, "status", "--kubeconfig", e.kubeconfig)
	for _, want := range []string{
		"waiting for the order of their lock, or a deletion's uninstall:",
		"local/dev/w20: sequence 2: wave 3 of 4: waiting for local/dev/" + waveFailing + "@2: its task " + waveFailing + "-2 failed",
		"local/dev/w30: sequence 2: wave 4 of 4: waiting for wave 3 to succeed and be Ready",
		"WaitingForOrder",
	} {
		if !strings.Contains(status, want) {
			t.Errorf("styrminctl status does not say %q:\n%s", want, status)
		}
	}

	t.Log("the agent killed between waves keeps the order")
	e.agent.Kill(t)
	e.startAgent(t)
	time.Sleep(3 * time.Second) // a resumed agent that forgot the order would start wave 3 now
	waitWaiting("after the restart")

	t.Log("a fix commit of the failed deployment completes the rollout")
	fixed := e.change(t, waveFailing, waveFailing+": no fault", map[string][]byte{waveFile(waveFailing): appConfig("1.0.0", "")})
	fix := e.waitTask(t, "dev-"+waveFailing, waveFailing, fixed)
	requireSucceeded(t, fix)
	for i := 20; i < waveDeployments; i++ {
		requireSucceeded(t, e.waitTask(t, "dev-"+waveName(i), waveName(i), 2))
	}
	if w3 := firstStart(t, e, 20, 30); w3.Before(fix.Status.FinishedAt.Time) {
		t.Errorf("wave 3 started at %v, before the fix ended at %v", w3, fix.Status.FinishedAt)
	}
	if w3End, w4 := lastEnd(t, e, 20, 30), firstStart(t, e, 30, 40); w4.Before(w3End.Add(wavePause - time.Second)) {
		t.Errorf("wave 4 started at %v, before wave 3's end %v and the pause", w4, w3End)
	}
}

// firstStart is when the first fan-out task (sequence 2) of deployments
// from..to-1 started its first step.
func firstStart(t *testing.T, e *agentEnv, from, to int) time.Time {
	t.Helper()
	var first time.Time
	for i := from; i < to; i++ {
		task := e.waitTask(t, "dev-"+waveName(i), waveName(i), 2)
		if len(task.Status.Steps) == 0 || task.Status.Steps[0].StartedAt == nil {
			t.Fatalf("%s ran no step", task.Name)
		}
		if s := task.Status.Steps[0].StartedAt.Time; first.IsZero() || s.Before(first) {
			first = s
		}
	}
	return first
}

// lastEnd is when the last fan-out task of deployments from..to-1 ended.
func lastEnd(t *testing.T, e *agentEnv, from, to int) time.Time {
	t.Helper()
	var last time.Time
	for i := from; i < to; i++ {
		task := e.waitTask(t, "dev-"+waveName(i), waveName(i), 2)
		if task.Status.FinishedAt != nil && task.Status.FinishedAt.After(last) {
			last = task.Status.FinishedAt.Time
		}
	}
	return last
}
