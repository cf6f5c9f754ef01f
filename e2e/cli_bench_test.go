package e2e

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/styrmin/styrmin/examples"
)

const (
	cliBenchEnvs   = 20
	cliBenchPerEnv = 50
)

// BenchmarkCLIFanOut1000 runs the built styrminctl, as a user or a CI job
// runs it, on a git checkout of 1,000 deployments (20 environments of 50,
// two in three webapp, one in three graphhub) whose head commit changes
// the cluster's domain: a fan-out to every deployment. It times whole
// processes: start, reading git, loading and resolving both sides,
// rendering, diffing and printing (plan), or writing the 1,000 lockfiles
// (lock), with the command's own settings (its GC target included).
//
//   - plan: `styrminctl plan --color never`, its output read to the end;
//   - lock: `styrminctl lock`, the lockfiles written into the working
//     tree (put back between runs, untimed);
//   - lock-commit: `styrminctl lock --commit --squash`, the same as one
//     commit (the branch put back between runs, untimed).
//
// With STYRMIN_CLI_REFERENCE naming another styrminctl (an older
// commit's build), the sub-benchmarks run for both, this/… and
// reference/…, on the same checkout, then paired/… runs the two in turn
// and reports the median of the pairs' ratios (wall-ratio, cpu-ratio,
// this over the reference): the figures to quote on a machine whose
// speed drifts.
//
// The commands keep the driver checks of their sandbox children (see
// drivers.Sandbox.KeepChecks) in this run's folder, as a user's do in
// their cache folder: each build runs the plan once, untimed, first, so
// this/… finds every driver version checked, as a second command with
// unchanged drivers does. this-no-checks/… runs the same commands with --driver-checks "",
// every driver load checked in a child, as a first command (and
// paired-no-checks/… pairs the two builds so).
//
// Besides ns/op it reports ms/op, the command's CPU seconds (user and
// system, both cores, its sandbox children included: wait4's usage) and
// its peak resident memory. -benchmem's figures are the benchmark's own,
// not the command's: the library benchmarks (planner's
// BenchmarkPlanClusterFanOut1000, resolver's BenchmarkLockChain) give
// the allocations.
func BenchmarkCLIFanOut1000(b *testing.B) {
	ctl, _ := buildBinaries(b)
	dir := fanOutCheckout(b, ctl, cliBenchEnvs, cliBenchPerEnv, false)
	n := cliBenchEnvs * cliBenchPerEnv
	ctls := []struct{ name, path string }{{"this", ctl}}
	if ref := os.Getenv("STYRMIN_CLI_REFERENCE"); ref != "" {
		// Another build (an older commit's, say) run on the same checkout
		// in the same run, for before-and-after ratios on a noisy machine.
		// The commands run in the checkout: a relative path is the
		// caller's.
		abs, err := filepath.Abs(ref)
		if err != nil {
			b.Fatal(err)
		}
		ctls = append(ctls, struct{ name, path string }{"reference", abs})
	}
	for _, c := range ctls {
		// Untimed, so that every timed run finds the drivers checked
		// (a reference build that keeps checks too included).
		warm := exec.Command(c.path, "--repo", dir, "plan", "--color", "never")
		if out, err := warm.CombinedOutput(); err != nil {
			b.Fatalf("%s plan: %v\n%s", c.name, err, tail(string(out), 2000))
		}
		cliFanOut(b, c.name, c.path, dir, n)
	}
	cliFanOut(b, "this-no-checks", ctl, dir, n, "--driver-checks=")
	if len(ctls) == 2 {
		cliPaired(b, "paired", ctls[0].path, ctls[1].path, dir, n)
		// Both as a first command: every driver and input checked in a
		// child.
		cliPaired(b, "paired-no-checks", ctls[0].path, ctls[1].path, dir, n, "--driver-checks=")
	}
	// The same fleet with no two deployment files of the same text (each
	// names itself in a comment): what a command costs when nothing it
	// evaluates per file repeats (parameter sets still do).
	distinct := fanOutCheckout(b, ctl, cliBenchEnvs, cliBenchPerEnv, true)
	for _, c := range ctls {
		cliFanOut(b, c.name+"-distinct-files", c.path, distinct, n)
	}
	// One deployment changed in the locked fleet, after a command that
	// evaluated the others (each build's plan, untimed): a large fleet's
	// usual change, where a build that keeps what inputs evaluated to
	// reads the unchanged deployments' back.
	one := oneChangeCheckout(b, ctl)
	for _, c := range ctls {
		warm := exec.Command(c.path, "--repo", one, "plan", "--color", "never")
		if out, err := warm.CombinedOutput(); err != nil {
			b.Fatalf("%s plan: %v\n%s", c.name, err, tail(string(out), 2000))
		}
		cliFanOut(b, c.name+"-one-change", c.path, one, 1)
	}
	if len(ctls) == 2 {
		cliPaired(b, "paired-one-change", ctls[0].path, ctls[1].path, one, 1)
	}
}

// oneChangeCheckout is the fan-out checkout locked and committed, then a
// commit that changes one deployment's parameters, not yet locked.
func oneChangeCheckout(b *testing.B, ctl string) string {
	b.Helper()
	dir := fanOutCheckout(b, ctl, cliBenchEnvs, cliBenchPerEnv, false)
	if out, err := exec.Command(ctl, "--repo", dir, "lock", "--commit").CombinedOutput(); err != nil {
		b.Fatalf("styrminctl lock --commit: %v\n%s", err, tail(string(out), 2000))
	}
	file := filepath.Join(dir, "clusters/bench/environments/e00/deployments/app-00.cue")
	data, err := os.ReadFile(file)
	if err != nil {
		b.Fatal(err)
	}
	changed := strings.Replace(string(data), "replicas: 1,", "replicas: 2,", 1)
	if changed == string(data) {
		b.Fatalf("%s sets no replicas: 1:\n%s", file, data)
	}
	if err := os.WriteFile(file, []byte(changed), 0o644); err != nil {
		b.Fatal(err)
	}
	git(b, dir, "commit", "-q", "-am", "e00/app-00: two replicas")
	return dir
}

// cliCommand is one command of the benchmark: its arguments, the check
// of its output, and what puts the checkout back after it (untimed).
type cliCommand struct {
	name  string
	args  []string
	check func(b *testing.B, out string)
	reset func(b *testing.B)
}

// cliCommands are plan, lock and lock --commit --squash on the checkout
// in dir of n deployments, each with the global flags.
func cliCommands(b *testing.B, dir string, n int, global ...string) []cliCommand {
	head := strings.TrimSpace(git(b, dir, "rev-parse", "HEAD"))
	locked := func(what string) func(b *testing.B, out string) {
		return func(b *testing.B, out string) {
			if got := strings.Count("\n"+out, "\nlocked "); got != n {
				b.Fatalf("%s wrote %d lockfiles, want %d:\n%s", what, got, n, tail(out, 2000))
			}
		}
	}
	return []cliCommand{{
		name: "plan",
		args: slices.Concat([]string{"--repo", dir}, global, []string{"plan", "--color", "never"}),
		check: func(b *testing.B, out string) {
			if !strings.Contains(out, fmt.Sprintf("%d to update", n)) {
				b.Fatalf("plan does not update %d deployments:\n%s", n, tail(out, 2000))
			}
		},
	}, {
		name:  "lock",
		args:  slices.Concat([]string{"--repo", dir}, global, []string{"lock"}),
		check: locked("lock"),
		reset: func(b *testing.B) { git(b, dir, "checkout", "--", "locks") },
	}, {
		name:  "lock-commit",
		args:  slices.Concat([]string{"--repo", dir}, global, []string{"lock", "--commit", "--squash"}),
		check: locked("lock --commit"),
		reset: func(b *testing.B) { git(b, dir, "reset", "--hard", "-q", head) },
	}}
}

// runCLI runs c with ctl in dir, adding its cost to u, checks its output
// and puts the checkout back (untimed).
func runCLI(b *testing.B, u *cliUsage, c cliCommand, ctl, dir string) {
	b.Helper()
	out := u.run(b, dir, ctl, c.args...)
	b.StopTimer()
	defer b.StartTimer()
	c.check(b, out)
	if c.reset != nil {
		c.reset(b)
	}
}

// cliFanOut runs the plan, lock and lock-commit sub-benchmarks of one
// styrminctl with the global flags, named label/plan and so on.
func cliFanOut(b *testing.B, label, ctl, dir string, n int, global ...string) {
	for _, c := range cliCommands(b, dir, n, global...) {
		b.Run(label+"/"+c.name, func(b *testing.B) {
			var u cliUsage
			for b.Loop() {
				runCLI(b, &u, c, ctl, dir)
			}
			u.report(b)
		})
	}
}

// cliPaired runs each command with this build and the reference in turn
// (this first in odd iterations, the reference first in even ones) and
// reports, besides each one's figures, the median of the pairs' ratios,
// this over the reference: a pair's two runs meet the machine at the same
// speed, where five runs of one build and then five of the other can
// meet it at speeds a factor apart (seen on a shared virtual machine).
func cliPaired(b *testing.B, name, this, ref, dir string, n int, global ...string) {
	for _, c := range cliCommands(b, dir, n, global...) {
		b.Run(name+"/"+c.name, func(b *testing.B) {
			var a, r cliUsage
			var wall, cpu []float64
			i := 0
			for b.Loop() {
				a0, r0 := a, r
				if i%2 == 0 {
					runCLI(b, &a, c, this, dir)
					runCLI(b, &r, c, ref, dir)
				} else {
					runCLI(b, &r, c, ref, dir)
					runCLI(b, &a, c, this, dir)
				}
				i++
				wall = append(wall, float64(a.wall-a0.wall)/float64(r.wall-r0.wall))
				cpu = append(cpu, float64(a.cpu-a0.cpu)/float64(r.cpu-r0.cpu))
			}
			b.ReportMetric(median(wall), "wall-ratio")
			b.ReportMetric(median(cpu), "cpu-ratio")
			if a.runs > 0 && r.runs > 0 {
				b.ReportMetric(float64(a.wall.Milliseconds())/float64(a.runs), "this-ms/op")
				b.ReportMetric(float64(r.wall.Milliseconds())/float64(r.runs), "reference-ms/op")
				b.ReportMetric(a.cpu.Seconds()/float64(a.runs), "this-cpu-s/op")
				b.ReportMetric(r.cpu.Seconds()/float64(r.runs), "reference-cpu-s/op")
			}
		})
	}
}

// median is the middle of xs (the mean of the middle two for an even
// count); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cliUsage sums what the runs of a command cost.
type cliUsage struct {
	runs    int
	wall    time.Duration
	cpu     time.Duration
	peakRSS int64 // KiB
	// minWall is the fastest run: on a machine shared with others (a
	// virtual machine's neighbours), the closest to an idle one.
	minWall time.Duration
}

// run runs the command in dir and returns its standard output; a failure
// fails the benchmark with its output.
func (u *cliUsage) run(b *testing.B, dir, name string, args ...string) string {
	b.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start)
	u.wall += took
	if u.minWall == 0 || took < u.minWall {
		u.minWall = took
	}
	if err != nil {
		b.Fatalf("%s %s: %v\n%s\n%s", name, strings.Join(args, " "), err, tail(out.String(), 2000), tail(errb.String(), 2000))
	}
	u.runs++
	u.cpu += cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		u.peakRSS = max(u.peakRSS, ru.Maxrss)
	}
	return out.String()
}

func (u *cliUsage) report(b *testing.B) {
	if u.runs == 0 {
		return
	}
	b.ReportMetric(float64(u.wall.Milliseconds())/float64(u.runs), "ms/op")
	b.ReportMetric(float64(u.minWall.Milliseconds()), "min-ms")
	b.ReportMetric(u.cpu.Seconds()/float64(u.runs), "cpu-s/op")
	b.ReportMetric(float64(u.peakRSS)/1024, "peak-rss-MiB")
}

// fanOutCheckout is a git checkout of the example drivers and envs×perEnv
// deployments, locked in one commit, and then a commit that changes the
// cluster's domain, not yet locked.
func fanOutCheckout(b *testing.B, ctl string, envs, perEnv int, distinct bool) string {
	b.Helper()
	dir := b.TempDir()
	if err := os.CopyFS(filepath.Join(dir, "drivers"), mustSub(b, examples.Repo(), "drivers")); err != nil {
		b.Fatal(err)
	}
	write := func(p, s string) {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(s), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	cluster := func(domain string) string {
		return fmt.Sprintf("domain:       %q\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nconfig: logFormat: \"json\"\n", domain)
	}
	write("styrmin.cue", "deletionThreshold: 1\n")
	write("clusters/bench/cluster.cue", cluster("bench.styrmin.dev"))
	for e := range envs {
		env := fmt.Sprintf("e%02d", e)
		at := "clusters/bench/environments/" + env
		write(at+"/environment.cue", fmt.Sprintf("backupLocation: \"s3://backups/bench/%s\"\nconfig: logLevel: \"info\"\n", env))
		for i := range perEnv {
			spec := fmt.Sprintf("driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: %d, ingress: true}\n", 1+i%3)
			if i%3 == 2 {
				spec = fmt.Sprintf("driver: \"graphhub\"\nappVersion: \"1.4.0\"\nparameters: {\n\tworkers: %d\n\tdatabasePassword: {name: \"db\", key: \"password\"}\n}\n", 1+i%4)
			}
			if distinct {
				spec = fmt.Sprintf("// app-%02d of %s\n", i, env) + spec
			}
			write(fmt.Sprintf("%s/deployments/app-%02d.cue", at, i), spec)
		}
	}
	git(b, dir, "init", "-q", "-b", "main")
	git(b, dir, "add", "-A")
	git(b, dir, "commit", "-q", "-m", "configuration")
	if out, err := exec.Command(ctl, "--repo", dir, "lock", "--commit").CombinedOutput(); err != nil {
		b.Fatalf("styrminctl lock --commit: %v\n%s", err, tail(string(out), 2000))
	}
	write("clusters/bench/cluster.cue", cluster("apps.styrmin.dev"))
	git(b, dir, "commit", "-q", "-am", "cluster: a new domain")
	return dir
}

func mustSub(b *testing.B, fsys fs.FS, dir string) fs.FS {
	sub, err := fs.Sub(fsys, dir)
	if err != nil {
		b.Fatal(err)
	}
	return sub
}

// git runs git in dir with a fixed identity and returns its output.
func git(b *testing.B, dir string, args ...string) string {
	b.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@example.com",
		"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		b.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
