package planner

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// scenario is a change made to a locked copy of the example repository.
type scenario struct {
	name   string
	change func(t *testing.T, dir string)
	opts   Options
	check  func(t *testing.T, p *Plan)
}

const (
	devEnv     = "clusters/local/environments/dev/environment.cue"
	stagingEnv = "clusters/local/environments/staging/environment.yaml"
	clusterCue = "clusters/local/cluster.cue"
	devWeb     = "clusters/local/environments/dev/deployments/web.cue"
	devHub     = "clusters/local/environments/dev/deployments/hub.cue"
	stagingWeb = "clusters/local/environments/staging/deployments/web.yaml"
	stagingHub = "clusters/local/environments/staging/deployments/hub.cue"
)

var scenarios = []scenario{
	{
		name: "parameter-change",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, devWeb, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: replicas: 3\n")
		},
		check: func(t *testing.T, p *Plan) {
			d := onlyDeployment(t, p, "local/dev/web", WorkflowUpdate)
			wantCauses(t, d, "deployment "+devWeb+": parameters.replicas")
			wantChange(t, d, "context.parameters.replicas", OpChanged, "2", "3")
			wantChange(t, d, "values.replicaCount", OpChanged, "2", "3")
			wantActions(t, d, "update/core/1:upgradeDeploymentVersion")
			wantObject(t, d, "Deployment/dev-web/web changed: 1 field")
			// dev/hub connects to web, but web's endpoints did not change.
			if p.Summary.Unchanged != 3 {
				t.Errorf("unchanged = %d, want 3", p.Summary.Unchanged)
			}
		},
	},
	{
		name: "app-version-upgrade",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, devHub, strings.Replace(readFile(t, dir, devHub), `appVersion: "1.4.0"`, `appVersion: "1.5.0"`, 1))
		},
		check: func(t *testing.T, p *Plan) {
			d := onlyDeployment(t, p, "local/dev/hub", WorkflowUpgrade)
			if d.From.DriverVersion != "1.0.0" || d.To.DriverVersion != "2.0.0" {
				t.Errorf("driver %s → %s, want 1.0.0 → 2.0.0 (1.5.0 needs graphhub 2.0.0)", d.From.DriverVersion, d.To.DriverVersion)
			}
			wantCauseKinds(t, d, CauseDeployment, CauseDriver)
			wantActions(t, d,
				"upgrade/pre/1:exec", // maintenance on
				"upgrade/pre/2:stopComponents",
				"upgrade/pre/3:runJob", // migrate
				"upgrade/core/1:upgradeDeploymentVersion",
				"upgrade/post/1:startComponents",
				"upgrade/post/2:waitReady",
				"upgrade/post/3:exec", // maintenance off
			)
			wantChange(t, d, "context.deployment.appVersion", OpChanged, `"1.4.0"`, `"1.5.0"`)
			wantChange(t, d, "context.parameters.cacheMemory", OpAdded, "", `"128Mi"`)
			if d.Manifests.Changed == 0 {
				t.Errorf("an image tag change left every object unchanged: %+v", d.Manifests)
			}
		},
	},
	{
		name: "new-deployment",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "clusters/local/environments/dev/deployments/api.cue",
				"driver:     \"webapp\"\nappVersion: \"1.27.0\"\nparameters: {replicas: 2, ingress: true}\n")
		},
		check: func(t *testing.T, p *Plan) {
			d := onlyDeployment(t, p, "local/dev/api", WorkflowCreate)
			if d.FromSequence != 0 || d.ToSequence != 1 {
				t.Errorf("sequence %d → %d, want 0 → 1", d.FromSequence, d.ToSequence)
			}
			wantCauses(t, d, "deployment clusters/local/environments/dev/deployments/api.cue")
			wantActions(t, d, "setup/core/1:upgradeDeploymentVersion")
			if d.Manifests.Added == 0 || d.Manifests.Changed+d.Manifests.Removed+d.Manifests.Unchanged != 0 {
				t.Errorf("manifests of a new deployment: %+v, want only added objects", d.Manifests)
			}
			wantObject(t, d, "Ingress/dev-api/api added")
		},
	},
	{
		name: "deletion",
		change: func(t *testing.T, dir string) {
			removeFile(t, dir, stagingWeb)
		},
		check: func(t *testing.T, p *Plan) {
			d := onlyDeployment(t, p, "local/staging/web", WorkflowDelete)
			if d.FromSequence != 1 || d.ToSequence != 2 || d.To != nil {
				t.Errorf("deletion %d → %d (to %+v), want 1 → 2 and no new instance", d.FromSequence, d.ToSequence, d.To)
			}
			wantCauses(t, d, "deployment "+stagingWeb)
			wantActions(t, d, "delete/core/1:upgradeDeploymentVersion")
			if d.Manifests.Removed == 0 || d.Manifests.Added+d.Manifests.Changed != 0 {
				t.Errorf("manifests of a deletion: %+v, want only removed objects", d.Manifests)
			}
			if p.Deletions.Refused || p.Deletions.Count != 1 || p.Deletions.Threshold != 1 {
				t.Errorf("one deletion with threshold 1: %+v, want allowed", p.Deletions)
			}
		},
	},
	{
		name: "environment-fan-out",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, stagingEnv, strings.Replace(readFile(t, dir, stagingEnv), "logLevel: info", "logLevel: error", 1))
		},
		check: func(t *testing.T, p *Plan) {
			d := onlyDeployment(t, p, "local/staging/web", WorkflowUpdate)
			wantCauses(t, d, "environment "+stagingEnv+": config.logLevel")
			want := []LeftOut{{ID: "local/staging/hub", Path: "config.logLevel", ChangedIn: stagingEnv,
				OverriddenBy: Origin{Layer: "deployment", File: stagingHub}}}
			if !slices.Equal(p.LeftOut, want) {
				t.Errorf("left out %+v, want %+v", p.LeftOut, want)
			}
			wantBlast(t, p, "environment local/staging: 1 of 2 deployments redeploy")
		},
	},
	{
		name: "cluster-fan-out",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCue, strings.Replace(readFile(t, dir, clusterCue), `logFormat: "json"`, `logFormat: "text"`, 1))
		},
		check: func(t *testing.T, p *Plan) {
			if len(p.Deployments) != 4 {
				t.Fatalf("%d deployments planned, want all 4", len(p.Deployments))
			}
			for _, d := range p.Deployments {
				wantCauses(t, d, "cluster "+clusterCue+": config.logFormat")
			}
			wantBlast(t, p, "environment local/dev: 2 of 2 deployments redeploy", "environment local/staging: 2 of 2 deployments redeploy")
		},
	},
}

func TestScenariosRenderToGoldenFiles(t *testing.T) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			base := lockedExample(t)
			head := copyTree(t, base)
			sc.change(t, head)
			p := computePlan(t, base, head, sc.opts)
			if sc.check != nil {
				sc.check(t, p)
			}
			for _, f := range Formats {
				var buf bytes.Buffer
				if err := Render(&buf, p, f, RenderOptions{}); err != nil {
					t.Fatal(err)
				}
				ext := map[Format]string{FormatText: "txt", FormatMarkdown: "md", FormatJSON: "json"}[f]
				golden(t, fmt.Sprintf("%s.%s", sc.name, ext), buf.Bytes())
				if f == FormatJSON {
					validatePlanJSON(t, buf.Bytes())
				}
			}
		})
	}
}

func readFile(t *testing.T, dir, rel string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func onlyDeployment(t *testing.T, p *Plan, id string, w Workflow) *Deployment {
	t.Helper()
	var ids []string
	for _, d := range p.Deployments {
		ids = append(ids, d.ID+" "+string(d.Workflow))
	}
	if len(p.Deployments) != 1 || p.Deployments[0].ID != id || p.Deployments[0].Workflow != w {
		t.Fatalf("planned %v, want only %s %s", ids, id, w)
	}
	return p.Deployments[0]
}

func wantCauses(t *testing.T, d *Deployment, want ...string) {
	t.Helper()
	var got []string
	for _, c := range d.Causes {
		got = append(got, describeCause(c))
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: causes %q, want %q", d.ID, got, want)
	}
}

func wantCauseKinds(t *testing.T, d *Deployment, want ...CauseKind) {
	t.Helper()
	var got []CauseKind
	for _, c := range d.Causes {
		got = append(got, c.Kind)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: cause kinds %q, want %q (%+v)", d.ID, got, want, d.Causes)
	}
}

func wantChange(t *testing.T, d *Deployment, path string, op ChangeOp, old, new string) {
	t.Helper()
	for _, c := range d.Changes {
		if c.Path != path {
			continue
		}
		gotOld, gotNew := "", ""
		if c.Old != nil {
			gotOld = changeValue(c, c.Old)
		}
		if c.New != nil {
			gotNew = changeValue(c, c.New)
		}
		if c.Op != op || gotOld != old || gotNew != new {
			t.Errorf("%s: %s %s %s → %s, want %s %s → %s", d.ID, path, c.Op, gotOld, gotNew, op, old, new)
		}
		return
	}
	var paths []string
	for _, c := range d.Changes {
		paths = append(paths, c.Path)
	}
	t.Errorf("%s: no change at %s (changes: %s)", d.ID, path, strings.Join(paths, ", "))
}

func wantActions(t *testing.T, d *Deployment, want ...string) {
	t.Helper()
	var got []string
	for _, a := range d.Actions {
		got = append(got, a.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: actions %q, want %q", d.ID, got, want)
	}
}

func wantObject(t *testing.T, d *Deployment, prefix string) {
	t.Helper()
	var got []string
	for _, o := range d.Manifests.Objects {
		if strings.HasPrefix(o.Summary(), prefix) {
			return
		}
		got = append(got, o.Summary())
	}
	t.Errorf("%s: no object %q in %q", d.ID, prefix, got)
}

func wantBlast(t *testing.T, p *Plan, want ...string) {
	t.Helper()
	var got []string
	for _, e := range p.BlastRadius {
		got = append(got, e.String())
	}
	if !slices.Equal(got, want) {
		t.Errorf("blast radius %q, want %q", got, want)
	}
}

// validatePlanJSON decodes the output strictly into the documented types
// and checks the fields the schema requires.
func validatePlanJSON(t *testing.T, data []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("plan JSON does not decode into planner.Plan: %v", err)
	}
	if p.SchemaVersion != SchemaVersion {
		t.Errorf("schemaVersion %q", p.SchemaVersion)
	}
}
