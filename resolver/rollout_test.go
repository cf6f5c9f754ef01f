package resolver

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestWaveSplitSizes(t *testing.T) {
	for _, tc := range []struct {
		split waveSplit
		n     int
		want  []int
	}{
		{waveSplit{}, 5, []int{5}},
		{waveSplit{count: 4}, 40, []int{10, 10, 10, 10}},
		{waveSplit{count: 4}, 10, []int{3, 3, 2, 2}},
		{waveSplit{count: 5}, 3, []int{1, 1, 1}},
		{waveSplit{percent: 10}, 40, []int{4, 4, 4, 4, 4, 4, 4, 4, 4, 4}},
		{waveSplit{percent: 30}, 10, []int{3, 3, 3, 1}},
		{waveSplit{percent: 1}, 3, []int{1, 1, 1}},
		{waveSplit{percent: 100}, 7, []int{7}},
		{waveSplit{count: 3}, 0, nil},
	} {
		if got := tc.split.split(tc.n); !slices.Equal(got, tc.want) {
			t.Errorf("%+v over %d: %v, want %v", tc.split, tc.n, got, tc.want)
		}
	}
}

// fanOutRepo is the example repository with n more webapp deployments in
// dev (w00…) and the given styrmin.cue, locked once.
func fanOutRepo(t *testing.T, n int, settings string) string {
	t.Helper()
	dir := exampleCopy(t)
	for i := range n {
		writeFile(t, dir, fmt.Sprintf("clusters/local/environments/dev/deployments/w%02d.cue", i), "driver: \"webapp\"\nappVersion: \"1.25.0\"\n")
	}
	writeFile(t, dir, "styrmin.cue", settings)
	lockDirInto(t, dir)
	return dir
}

// clusterFanOut changes a cluster setting every deployment reads.
func clusterFanOut(t *testing.T, dir, logFormat string) []LockChange {
	t.Helper()
	writeFile(t, dir, "clusters/local/cluster.cue", "domain: \"local.styrmin.dev\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nconfig: logFormat: \""+logFormat+"\"\nparameters: logLevel: \"info\"\n")
	return lockDirInto(t, dir)
}

// wavesOf groups changes by (group, wave), failing on a change outside
// any wave.
func wavesOf(t *testing.T, changes []LockChange) map[string][]LockChange {
	t.Helper()
	out := map[string][]LockChange{}
	for _, c := range changes {
		r := c.Next.Rollout
		if r == nil {
			t.Fatalf("%s is in no wave", c.ID)
		}
		k := fmt.Sprintf("%s#%d/%d", r.Group, r.Wave, r.Waves)
		out[k] = append(out[k], c)
	}
	return out
}

func refsOf(changes []LockChange) []string {
	var out []string
	for _, c := range changes {
		out = append(out, AfterRef(c.ID, c.Next.Sequence))
	}
	slices.Sort(out)
	return out
}

// TestClusterFanOutSplitsIntoWavesEachAfterTheWaveBefore pins the waves
// of a fan-out: 4 waves of equal size in ID order, each instance running
// after every instance of the wave before (and only those), the pause on
// every wave but the first, all of it in the lockfiles; the lock the
// environments' creation made had no waves.
func TestClusterFanOutSplitsIntoWavesEachAfterTheWaveBefore(t *testing.T) {
	dir := fanOutRepo(t, 36, "rollout: {waves: 4, gate: \"ready\", pause: \"2s\"}\n")
	changes := clusterFanOut(t, dir, "text")
	if len(changes) != 40 {
		t.Fatalf("the fan-out locked %d deployments, want 40", len(changes))
	}
	waves := wavesOf(t, changes)
	if len(waves) != 4 {
		t.Fatalf("%d waves, want 4: %v", len(waves), waves)
	}
	var prev []string
	for w := 1; w <= 4; w++ {
		members := waves[fmt.Sprintf("#%d/4", w)]
		if len(members) != 10 {
			t.Errorf("wave %d has %d deployments, want 10", w, len(members))
		}
		for _, c := range members {
			if !slices.Equal(c.Next.After, prev) {
				t.Errorf("wave %d: %s runs after %v, want the wave before %v", w, c.ID, c.Next.After, prev)
			}
			if want := map[bool]string{true: "", false: "2s"}[w == 1]; c.Next.Rollout.Pause != want {
				t.Errorf("wave %d: %s pauses %q, want %q", w, c.ID, c.Next.Rollout.Pause, want)
			}
			in, err := DecodeLock(c.Path(), c.Data)
			if err != nil || in.Rollout == nil || *in.Rollout != *c.Next.Rollout || !slices.Equal(in.After, c.Next.After) {
				t.Errorf("%s: the lockfile holds rollout %+v after %v (%v)", c.ID, in.Rollout, in.After, err)
			}
		}
		prev = refsOf(members)
	}
	// Deterministic: the first wave is the first ten IDs.
	if got := waves["#1/4"][0].ID; got != (ID{"local", "dev", "hub"}) {
		t.Errorf("the first wave starts with %s, want local/dev/hub", got)
	}
	// Waves are outside the digest: the same instances with or without them.
	for _, c := range changes {
		plain := *c.Next
		plain.Rollout, plain.After = nil, nil
		if dg, _ := plain.ComputeDigest(); dg != c.Next.Digest {
			t.Errorf("%s: the digest covers the rollout", c.ID)
		}
	}
}

// TestRolloutFollowsTheEnvironmentOrderAndEnvironmentsOwnWaves pins the
// two other ways to split: by an environment order (staging's waves
// first, then dev's, one chain), and an environment with a rollout of its
// own (its own chain, in parallel with the rest).
func TestRolloutFollowsTheEnvironmentOrderAndEnvironmentsOwnWaves(t *testing.T) {
	t.Run("order", func(t *testing.T) {
		dir := fanOutRepo(t, 4, "rollout: {order: [\"staging\", \"dev\"]}\n")
		writeFile(t, dir, "clusters/local/environments/dev/environment.cue", "namespacePrefix: \"dev\"\nrollout: waves: 2\n")
		lockDirInto(t, dir)
		waves := wavesOf(t, clusterFanOut(t, dir, "text"))
		staging, dev1, dev2 := waves["#1/3"], waves["#2/3"], waves["#3/3"]
		if len(waves) != 3 || len(staging) != 2 || len(dev1) != 3 || len(dev2) != 3 {
			t.Fatalf("waves %v, want staging's 2, then dev's 6 in two", waves)
		}
		for _, c := range staging {
			if c.ID.Environment != "staging" || c.Next.After != nil {
				t.Errorf("wave 1: %s after %v, want staging after nothing", c.ID, c.Next.After)
			}
		}
		for _, c := range dev1 {
			if !slices.Equal(c.Next.After, refsOf(staging)) {
				t.Errorf("wave 2: %s after %v, want staging's %v", c.ID, c.Next.After, refsOf(staging))
			}
		}
	})
	t.Run("an environment's own", func(t *testing.T) {
		dir := fanOutRepo(t, 4, "rollout: {waves: 2}\n")
		writeFile(t, dir, "clusters/local/environments/staging/environment.yaml", "namespacePrefix: staging\nrollout:\n  waves: 2\n  pause: 1m\n")
		lockDirInto(t, dir)
		waves := wavesOf(t, clusterFanOut(t, dir, "text"))
		if len(waves) != 4 || len(waves["#1/2"]) != 3 || len(waves["staging#1/2"]) != 1 || waves["staging#2/2"][0].Next.Rollout.Pause != "1m" {
			t.Fatalf("waves %v, want dev's two of 3 and staging's own two of 1", waves)
		}
		if got := waves["staging#2/2"][0].Next.After; !slices.Equal(got, refsOf(waves["staging#1/2"])) {
			t.Errorf("staging's second wave runs after %v, want only staging's first", got)
		}
	})
}

// TestOnlyAFanOutOfRunningDeploymentsIsSplit: creating deployments, one
// deployment's own change and a repository without rollout make no
// waves.
func TestOnlyAFanOutOfRunningDeploymentsIsSplit(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "styrmin.cue", "rollout: waves: 2\n")
	for _, c := range lockDirInto(t, dir) {
		if c.Next.Rollout != nil {
			t.Errorf("the creation of %s is in wave %+v", c.ID, c.Next.Rollout)
		}
	}
	writeFile(t, dir, "clusters/local/environments/dev/deployments/web.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
	if got := lockDirInto(t, dir); len(got) != 1 || got[0].Next.Rollout != nil || got[0].Next.After != nil {
		t.Errorf("one deployment's change: %+v", got)
	}
	writeFile(t, dir, "styrmin.cue", "deletionThreshold: 1\n")
	for _, c := range clusterFanOut(t, dir, "text") {
		if c.Next.Rollout != nil || c.Next.After != nil {
			t.Errorf("without rollout, %s is in wave %+v after %v", c.ID, c.Next.Rollout, c.Next.After)
		}
	}
}

// TestBadRolloutOrAfterGivesAClearErrorAndLocksNothing: every bad wave
// setting, and a lockfile whose after names an unknown or later
// instance, is refused naming the file and the field; nothing is locked.
func TestBadRolloutOrAfterGivesAClearErrorAndLocksNothing(t *testing.T) {
	const stagingEnv = "clusters/local/environments/staging/environment.yaml"
	cases := []struct {
		name, file, content string
		want                []string
	}{
		{"no waves", "styrmin.cue", "rollout: waves: 0\n", []string{"styrmin.cue", "field rollout.waves", "from 1 to 100"}},
		{"too many waves", "styrmin.cue", "rollout: waves: 101\n", []string{"field rollout.waves", "101"}},
		{"a fraction of a wave", "styrmin.cue", "rollout: waves: 2.5\n", []string{"field rollout.waves", "whole number"}},
		{"no share", "styrmin.cue", "rollout: waves: \"0%\"\n", []string{"field rollout.waves", `"0%"`, `"1%" to "100%"`}},
		{"more than the whole", "styrmin.cue", "rollout: waves: \"150%\"\n", []string{"field rollout.waves", `"150%"`}},
		{"words", "styrmin.cue", "rollout: waves: \"ten\"\n", []string{"field rollout.waves", `"ten"`}},
		{"unknown gate", "styrmin.cue", "rollout: gate: \"healthy\"\n", []string{"field rollout.gate", `"healthy"`, `"ready"`}},
		{"bad pause", "styrmin.cue", "rollout: pause: \"soon\"\n", []string{"field rollout.pause", `"soon"`, "duration"}},
		{"negative pause", "styrmin.cue", "rollout: pause: \"-1s\"\n", []string{"field rollout.pause", `"-1s"`}},
		{"unknown environment in the order", "styrmin.cue", "rollout: order: [\"dev\", \"prod\"]\n", []string{"field rollout.order[1]", `"prod"`, "expected an environment"}},
		{"an environment twice", "styrmin.cue", "rollout: order: [\"dev\", \"dev\"]\n", []string{"field rollout.order[1]", "twice"}},
		{"an order in an environment", stagingEnv, "namespacePrefix: staging\nrollout:\n  order: [dev]\n", []string{stagingEnv, "rollout.order"}},
		{"an unknown rollout field", "styrmin.cue", "rollout: speed: 3\n", []string{"styrmin.cue", "speed"}},
		{"a bad waves in an environment", stagingEnv, "namespacePrefix: staging\nrollout:\n  waves: -1\n", []string{stagingEnv, "field rollout.waves"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			writeFile(t, dir, tc.file, tc.content)
			before := snapshot(t, dir)
			res, locks, err := resolveDir(t, dir)
			if err == nil {
				_, err = planLocksStrict(res, locks)
			}
			if err == nil {
				t.Fatal("bad rollout accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			if snapshot(t, dir) != before {
				t.Error("bad input changed the repository")
			}
		})
	}

	// An after naming a deployment without a lock, or a later instance.
	dir := exampleCopy(t)
	lockDirInto(t, dir)
	hub := "locks/local/dev/hub.lock.yaml"
	for after, want := range map[string]string{
		"local/dev/db@1":  `"local/dev/db@1": no deployment local/dev/db is locked`,
		"local/dev/web@7": `"local/dev/web@7": local/dev/web is locked at sequence 1`,
	} {
		b, err := os.ReadFile(filepath.Join(dir, hub))
		must(t, err)
		in, err := DecodeLock(hub, b)
		must(t, err)
		in.After = []string{after}
		data, err := EncodeLock(in)
		must(t, err)
		writeFile(t, dir, hub, string(data))
		_, _, err = resolveDir(t, dir)
		if err == nil || !strings.Contains(err.Error(), hub+": field after[0]: "+want) {
			t.Errorf("after %q: %v, want %q naming the file and field", after, err, want)
		}
	}
}
