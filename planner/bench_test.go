package planner

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/resolver"
)

// fanOutRepo is a generated repository with a cluster change that
// reaches every deployment.
type fanOutRepo struct {
	base, head string
	input      Input
}

// generateFanOutRepo writes a repository with envs environments of perEnv
// deployments each (two webapps for every graphhub, the example drivers),
// locks it, and copies it into a head where the cluster's domain changes:
// every deployment's context changes and every Ingress with it.
func generateFanOutRepo(tb testing.TB, envs, perEnv int) *fanOutRepo {
	tb.Helper()
	base := tb.TempDir()
	if err := os.CopyFS(filepath.Join(base, "drivers"), os.DirFS(filepath.Join(exampleDir, "drivers"))); err != nil {
		tb.Fatal(err)
	}
	writeFile(tb, base, "styrmin.cue", "deletionThreshold: 1\n")
	writeFile(tb, base, "clusters/bench/cluster.cue", `domain:       "bench.styrmin.dev"
ingressClass: "nginx"
storageClasses: default: "standard"
config: logFormat: "json"
`)
	for e := 0; e < envs; e++ {
		env := fmt.Sprintf("e%02d", e)
		dir := "clusters/bench/environments/" + env
		writeFile(tb, base, dir+"/environment.cue", fmt.Sprintf("backupLocation: \"s3://backups/bench/%s\"\nconfig: logLevel: \"info\"\n", env))
		for i := 0; i < perEnv; i++ {
			var spec string
			if i%3 == 2 {
				spec = fmt.Sprintf("driver: \"graphhub\"\nappVersion: \"1.4.0\"\nparameters: {\n\tworkers: %d\n\tdatabasePassword: {name: \"db\", key: \"password\"}\n}\n", 1+i%4)
			} else {
				spec = fmt.Sprintf("driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: %d, ingress: true}\n", 1+i%3)
			}
			writeFile(tb, base, fmt.Sprintf("%s/deployments/app-%02d.cue", dir, i), spec)
		}
	}
	lockInto(tb, base)
	head := copyTree(tb, base)
	writeFile(tb, head, "clusters/bench/cluster.cue", `domain:       "apps.styrmin.dev"
ingressClass: "nginx"
storageClasses: default: "standard"
config: logFormat: "json"
`)
	r := &fanOutRepo{base: base, head: head}
	r.input = loadInput(tb, base, head)
	return r
}

// loadInput is what `styrminctl plan` does before Compute: load the head
// configuration and drivers, the base's locks and drivers, and resolve.
func loadInput(tb testing.TB, baseDir, headDir string) Input {
	baseFS, headFS := os.DirFS(baseDir), os.DirFS(headDir)
	locks, err := resolver.LoadLocks(baseFS)
	if err != nil {
		tb.Fatal(err)
	}
	baseCatalog, err := drivers.LoadCatalog(baseFS, "drivers", drivers.LoadOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	repo, err := resolver.NewLoader(0).Load(headFS)
	if err != nil {
		tb.Fatal(err)
	}
	headCatalog, err := drivers.LoadCatalog(headFS, "drivers", drivers.LoadOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	res := resolver.Resolve(repo, resolver.Options{Catalog: headCatalog, Locks: locks})
	if err := res.Err(); err != nil {
		tb.Fatal(err)
	}
	return Input{Base: locks, Head: res, Repo: repo, BaseFS: baseFS, HeadFS: headFS,
		Drivers: Catalogs{headCatalog, baseCatalog}, BaseName: "base", HeadName: "head"}
}

const (
	benchEnvs   = 20
	benchPerEnv = 50
)

// BenchmarkPlanClusterFanOut1000 measures a cluster change that reaches
// 1,000 deployments (20 environments of 50), in the same run:
//
//   - compute: Compute alone (diffs, actions, attribution and both renders
//     of every deployment), given the resolved head;
//   - end-to-end: what `styrminctl plan` does without git (ComputeTrees):
//     load the configuration, drivers and locks of both sides, resolve,
//     compute;
//   - renders: only the 2,000 Helm renders Compute does, with the same
//     parallelism, to give Helm's share;
//   - helm-template-process: `helm template` of the same chart and values
//     run as one process per deployment, the way wrappers around Helm do
//     it (set STYRMIN_HELM to a helm binary built from this module:
//     go build -o /tmp/helm helm.sh/helm/v4/cmd/helm).
//
// Each reports ms/plan and µs/deployment.
func BenchmarkPlanClusterFanOut1000(b *testing.B) {
	repo := generateFanOutRepo(b, benchEnvs, benchPerEnv)
	n := benchEnvs * benchPerEnv

	b.Run("compute", func(b *testing.B) {
		cpu := startCPU()
		for b.Loop() {
			p, err := Compute(repo.input, Options{})
			if err != nil {
				b.Fatal(err)
			}
			if len(p.Deployments) != n {
				b.Fatalf("%d deployments planned, want %d", len(p.Deployments), n)
			}
		}
		reportPerDeployment(b, n, cpu)
	})

	b.Run("end-to-end", func(b *testing.B) {
		cpu := startCPU()
		for b.Loop() {
			p, err := ComputeTrees(Trees{Base: os.DirFS(repo.base), BaseName: "base", Head: os.DirFS(repo.head), HeadName: "head"}, Options{})
			if err != nil {
				b.Fatal(err)
			}
			if len(p.Deployments) != n {
				b.Fatalf("%d deployments planned, want %d", len(p.Deployments), n)
			}
		}
		reportPerDeployment(b, n, cpu)
	})

	jobs := renderJobs(b, repo.input)
	b.Run("renders", func(b *testing.B) {
		cpu := startCPU()
		for b.Loop() {
			var failed atomic.Value
			parallel(len(jobs), 0, func(i int) {
				if _, err := jobs[i].drv.Render(jobs[i].side.ctx, jobs[i].side.values); err != nil {
					failed.Store(err)
				}
			})
			if err := failed.Load(); err != nil {
				b.Fatal(err)
			}
		}
		reportPerDeployment(b, n, cpu)
	})

	b.Run("helm-template-process", func(b *testing.B) {
		helm := os.Getenv("STYRMIN_HELM")
		if helm == "" {
			b.Skip("STYRMIN_HELM is not set: build the helm CLI from this module " +
				"(go build -o /tmp/helm helm.sh/helm/v4/cmd/helm) and set STYRMIN_HELM=/tmp/helm")
		}
		if _, err := os.Stat(helm); err != nil {
			b.Skipf("STYRMIN_HELM=%s: %v", helm, err)
		}
		// Only the new side, one process per deployment: what a wrapper
		// runs to show the desired manifests of a change.
		var news []renderJob
		for _, j := range jobs {
			if j.new {
				news = append(news, j)
			}
		}
		dir := b.TempDir()
		var i int
		cpu := startCPU()
		for b.Loop() {
			j := news[i%len(news)]
			i++
			values := filepath.Join(dir, "values.yaml")
			data, err := yaml.Marshal(j.side.values)
			if err != nil {
				b.Fatal(err)
			}
			if err := os.WriteFile(values, data, 0o644); err != nil {
				b.Fatal(err)
			}
			cmd := exec.Command(helm, "template", j.side.ctx.Deployment.Name, j.chart,
				"--namespace", j.side.ctx.Deployment.Namespace, "--values", values, "--kube-version", drivers.DefaultKubeVersion)
			cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+dir, "HELM_CONFIG_HOME="+dir, "HELM_DATA_HOME="+dir)
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("helm template: %v\n%s", err, out)
			}
		}
		// One process per deployment: an op is one deployment.
		self, children := cpu.since()
		b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/deployment")
		b.ReportMetric(float64(self+children)/float64(b.N), "cpu-µs/deployment")
	})
}

// cpuMark is the CPU time at the start of a measurement.
type cpuMark struct{ self, children int64 }

func startCPU() cpuMark {
	s, c := cpuTime()
	return cpuMark{s, c}
}

func (m cpuMark) since() (self, children int64) {
	s, c := cpuTime()
	return s - m.self, c - m.children
}

// reportPerDeployment reports wall time per plan and per deployment, and
// CPU time per plan and per deployment (on a shared machine the steadier
// figure), with -benchmem's figures.
func reportPerDeployment(b *testing.B, n int, cpu cpuMark) {
	b.ReportAllocs()
	self, _ := cpu.since()
	b.ReportMetric(float64(self)/1e6/float64(b.N), "cpu-s/op")
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N), "ms/plan")
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/deployment")
	b.ReportMetric(float64(self)/float64(b.N)/float64(n), "cpu-µs/deployment")
}

// renderJob is one render Compute does: one side of one deployment.
type renderJob struct {
	drv   *drivers.Driver
	side  side
	chart string // the chart folder, for helm template
	new   bool
}

func renderJobs(tb testing.TB, in Input) []renderJob {
	changes, err := resolver.PlanLocks(in.Head, in.Base)
	if err != nil {
		tb.Fatal(err)
	}
	var jobs []renderJob
	for _, c := range changes {
		for _, x := range []struct {
			in  *resolver.Instance
			new bool
		}{{c.Previous, false}, {c.Next, true}} {
			if x.in == nil || x.in.Tombstone() {
				continue
			}
			drv, ok := in.Drivers.Driver(x.in.Driver)
			if !ok {
				tb.Fatalf("driver of %s not found", x.in.ID)
			}
			s, err := sideOf(x.in)
			if err != nil {
				tb.Fatal(err)
			}
			chart := filepath.Join(exampleDir, "drivers", drv.Name, drv.Version, "chart")
			jobs = append(jobs, renderJob{drv: drv, side: s, chart: chart, new: x.new})
		}
	}
	return jobs
}

// TestGeneratedFanOutPlansEveryDeploymentWithAManifestChange pins what the
// benchmark measures, on a small generated repository: every deployment
// is planned, attributed to the cluster, and its Ingress changes.
func TestGeneratedFanOutPlansEveryDeploymentWithAManifestChange(t *testing.T) {
	repo := generateFanOutRepo(t, 2, 6)
	p, err := Compute(repo.input, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Deployments) != 12 {
		t.Fatalf("%d deployments planned, want 12", len(p.Deployments))
	}
	var kinds []string
	for _, d := range p.Deployments {
		if d.Manifests.Error != "" {
			t.Fatalf("%s: %s", d.ID, d.Manifests.Error)
		}
		if len(d.Causes) != 1 || d.Causes[0].Kind != CauseCluster || !slices.Equal(d.Causes[0].Paths, []string{"domain"}) {
			t.Errorf("%s: causes %+v, want the cluster's domain", d.ID, d.Causes)
		}
		var changed []string
		for _, o := range d.Manifests.Objects {
			changed = append(changed, o.Kind)
		}
		sort.Strings(changed)
		kinds = append(kinds, strings.Join(changed, ","))
	}
	for i, k := range kinds {
		if !strings.Contains(k, "Ingress") {
			t.Errorf("%s: changed objects %s, want the Ingress among them", p.Deployments[i].ID, k)
		}
	}
}
