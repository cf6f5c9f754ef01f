package resolver

import (
	"fmt"
	"os"
	"testing"
)

// generateRepo writes a desired-state repository with n deployments spread
// over envs environments of one cluster, alternating the example drivers,
// and returns its folder.
func generateRepo(tb testing.TB, n, envs int) string {
	tb.Helper()
	dir := exampleCopy(tb)
	if err := os.RemoveAll(dir + "/clusters"); err != nil {
		tb.Fatal(err)
	}
	writeFile(tb, dir, "clusters/bench/cluster.cue", "domain: \"bench.example.com\"\ningressClass: \"nginx\"\nstorageClasses: default: \"standard\"\nconfig: logFormat: \"json\"\n")
	for e := 0; e < envs; e++ {
		env := fmt.Sprintf("env%02d", e)
		writeFile(tb, dir, "clusters/bench/environments/"+env+"/environment.cue", fmt.Sprintf("namespacePrefix: %q\nconfig: logLevel: \"info\"\n", env))
	}
	for i := 0; i < n; i++ {
		env := fmt.Sprintf("env%02d", i%envs)
		var body string
		if i%4 == 3 {
			body = hubWith("")
		} else {
			body = fmt.Sprintf("driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: %d\n", 1+i%3)
		}
		writeFile(tb, dir, fmt.Sprintf("clusters/bench/environments/%s/deployments/app%04d.cue", env, i), body)
	}
	return dir
}

func benchmarkResolve(b *testing.B, n int) {
	dir := generateRepo(b, n, 20)
	fsys := os.DirFS(dir)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		ws, err := LoadWorkspace(fsys, WorkspaceOptions{})
		if err != nil {
			b.Fatal(err)
		}
		res := ws.Resolve()
		if err := res.Err(); err != nil {
			b.Fatal(err)
		}
		if len(res.Resolved) != n {
			b.Fatalf("resolved %d of %d", len(res.Resolved), n)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/deployment")
}

// BenchmarkResolve loads and resolves generated repositories (config,
// drivers, locks: everything `styrminctl lock` does before writing) at
// 100 and 1,000 deployments across 20 environments, to show the growth.
func BenchmarkResolve(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("deployments=%d", n), func(b *testing.B) { benchmarkResolve(b, n) })
	}
}
