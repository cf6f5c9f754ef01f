package planner

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/resolver"
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
	{
		name: "dedicated-ingress-on",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, clusterCue, readFile(t, dir, clusterCue)+"ingress: driver: \"ingress-nginx\"\ndedicatedIngress: true\n")
		},
		check: func(t *testing.T, p *Plan) {
			internal := map[string]string{}
			for _, d := range p.Deployments {
				if d.Internal != "" {
					internal[d.ID] = d.Internal
					wantCauseKinds(t, d, CauseCluster)
					continue
				}
				want := []string{"local/" + d.Environment + "/styrmin.ingress@1"}
				if d.Workflow != WorkflowUpdate || !slices.Equal(d.After, want) {
					t.Errorf("%s: %s after %v, want an update after %v", d.ID, d.Workflow, d.After, want)
				}
				wantCauses(t, d, "cluster "+clusterCue+": dedicatedIngress")
			}
			want := map[string]string{"local/styrmin.cluster/styrmin.ingress": "ingress", "local/dev/styrmin.ingress": "ingress", "local/staging/styrmin.ingress": "ingress"}
			if !reflect.DeepEqual(internal, want) || len(p.Deployments) != 7 {
				t.Errorf("internal deployments planned %v of %d, want %v of 7", internal, len(p.Deployments), want)
			}
		},
	},
}

// sensitiveWebapp marks webapp's message parameter sensitive, in the
// repository at dir (before it is locked, so both sides use it).
func sensitiveWebapp(t *testing.T, dir string) {
	t.Helper()
	const spec = "drivers/webapp/1.1.0/driver.cue"
	src := readFile(t, dir, spec)
	out := strings.Replace(src, `message: *"Hello from Styrmin" | string & !=""`, `message: *"Hello from Styrmin" | string & !="" @styrmin(sensitive)`, 1)
	if out == src {
		t.Fatalf("%s: message parameter not found; update the test", spec)
	}
	writeFile(t, dir, spec, out)
}

const (
	oldSecret = "hunter2-old-launch-code"
	// newSecret has characters URL encoding changes.
	newSecret = "correct horse/battery+staple&more"
	// shortSecret is below the length a substring masker would look for.
	shortSecret = "zQ%"
)

var sensitiveScenario = scenario{
	name: "sensitive-and-secret-change",
	change: func(t *testing.T, dir string) {
		writeFile(t, dir, devWeb, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \""+newSecret+"\"}\n")
		writeFile(t, dir, devHub, strings.Replace(readFile(t, dir, devHub), `name: "hub-db"`, `name: "hub-db-v2"`, 1))
	},
	check: func(t *testing.T, p *Plan) {
		if len(p.Deployments) != 2 {
			t.Fatalf("planned %d deployments, want dev/hub and dev/web", len(p.Deployments))
		}
		hub, web := p.Deployments[0], p.Deployments[1]
		wantChange(t, hub, "context.parameters.databasePassword", OpChanged, "secret hub-db/password", "secret hub-db-v2/password")
		wantChange(t, web, "context.parameters.message", OpChanged, Masked, MaskedChanged)
		wantObject(t, web, "ConfigMap/dev-web/web-content changed: 2 fields")
	},
}

// TestSensitiveValuesNeverAppearInAnyOutput locks a sensitive value,
// changes it, and looks for either value, in every form a leak could take
// (raw, upper-case, base64 once, twice and unpadded, URL-encoded), in the
// lockfiles and in the plan in every format: instances hold placeholders,
// so nothing rendered from them can hold a transformed value.
func TestSensitiveValuesNeverAppearInAnyOutput(t *testing.T) {
	base := copyTree(t, exampleDir)
	sensitiveWebapp(t, base)
	writeFile(t, base, devWeb, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \""+oldSecret+"\"}\n")
	lockInto(t, base)
	head := copyTree(t, base)
	sensitiveScenario.change(t, head)
	p := computePlan(t, base, head, Options{})
	sensitiveScenario.check(t, p)
	lock := readFile(t, base, "locks/local/dev/web.lock.yaml")
	if found := secrettest.Find([]byte(lock), oldSecret); len(found) > 0 {
		t.Errorf("the lockfile holds %s:\n%s", strings.Join(found, ", "), lock)
	}
	if !strings.Contains(lock, resolver.PlaceholderPrefix) {
		t.Errorf("the lockfile holds no placeholder for the sensitive value:\n%s", lock)
	}
	for _, f := range append(Formats(), FormatHTML) {
		for _, full := range []bool{false, true} {
			var buf bytes.Buffer
			if err := Render(&buf, p, f, RenderOptions{Full: full}); err != nil {
				t.Fatal(err)
			}
			if found := secrettest.Find(buf.Bytes(), oldSecret, newSecret); len(found) > 0 {
				t.Errorf("%s output (full=%v) contains %s", f, full, strings.Join(found, ", "))
			}
			if !bytes.Contains(buf.Bytes(), []byte(MaskedChanged)) {
				t.Errorf("%s output (full=%v) does not show that the sensitive value changed (%q)", f, full, MaskedChanged)
			}
			if f == FormatText && !full {
				golden(t, sensitiveScenario.name+".txt", buf.Bytes())
			}
		}
	}

	// A value too short to be masked as a substring is never rendered
	// either: a create of a deployment with it, in full.
	short := copyTree(t, base)
	writeFile(t, short, devWeb, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \""+shortSecret+"\"}\n")
	sp := computePlan(t, base, short, Options{})
	for _, f := range append(Formats(), FormatHTML) {
		var buf bytes.Buffer
		if err := Render(&buf, sp, f, RenderOptions{Full: true}); err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(buf.Bytes(), []byte(shortSecret)) || bytes.Contains(buf.Bytes(), []byte(strings.ToUpper(shortSecret))) {
			t.Errorf("%s output contains the short sensitive value %q", f, shortSecret)
		}
	}
}

func TestDeletionsAboveTheThresholdAreRefusedUnlessAllowed(t *testing.T) {
	base := lockedExample(t)
	head := copyTree(t, base)
	removeFile(t, head, stagingWeb)
	removeFile(t, head, stagingHub)

	p := computePlan(t, base, head, Options{})
	var re *RefusedError
	if err := p.Err(); !errors.As(err, &re) || re.Deletions.Count != 2 || re.Deletions.Threshold != 1 {
		t.Fatalf("two deletions with the example's threshold of 1: %v, want a RefusedError", err)
	}
	var buf bytes.Buffer
	if err := RenderText(&buf, p, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "REFUSED") || !strings.Contains(buf.String(), "--allow-deletions 2") {
		t.Errorf("text output does not say the plan is refused and how to allow it:\n%s", buf.String())
	}

	if err := computePlan(t, base, head, Options{AllowDeletions: 2}).Err(); err != nil {
		t.Errorf("allowed explicitly: %v", err)
	}
	if err := computePlan(t, base, head, Options{AllowDeletions: 1}).Err(); err == nil {
		t.Errorf("allowing 1 deletion let a plan with 2 through")
	}
	writeFile(t, head, "styrmin.cue", "deletionThreshold: 2\n")
	if err := computePlan(t, base, head, Options{}).Err(); err != nil {
		t.Errorf("repository threshold of 2: %v", err)
	}
	zero := 0
	if err := computePlan(t, base, head, Options{DeletionThreshold: &zero, AllowDeletions: 1}).Err(); err == nil {
		t.Errorf("threshold 0 and 1 allowed let 2 deletions through")
	}
}

func TestPlanSchemaRejectsMalformedPlans(t *testing.T) {
	base := lockedExample(t)
	head := copyTree(t, base)
	scenarios[0].change(t, head)
	var buf bytes.Buffer
	if err := RenderJSON(&buf, computePlan(t, base, head, Options{})); err != nil {
		t.Fatal(err)
	}
	schema := planSchema(t)
	mutations := map[string]func(m map[string]any){
		"unknown top-level field": func(m map[string]any) { m["extra"] = 1 },
		"wrong schema version":    func(m map[string]any) { m["schemaVersion"] = "styrmin.io/plan/v0" },
		"missing summary":         func(m map[string]any) { delete(m, "summary") },
		"unknown workflow": func(m map[string]any) {
			m["deployments"].([]any)[0].(map[string]any)["workflow"] = "restart"
		},
		"update without from": func(m map[string]any) {
			delete(m["deployments"].([]any)[0].(map[string]any), "from")
		},
		"changed without old value": func(m map[string]any) {
			d := m["deployments"].([]any)[0].(map[string]any)
			delete(d["changes"].([]any)[0].(map[string]any), "old")
		},
	}
	for name, mutate := range mutations {
		t.Run(name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
				t.Fatal(err)
			}
			if err := schema.Validate(m); err != nil {
				t.Fatalf("the unmodified plan does not validate: %v", err)
			}
			mutate(m)
			if err := schema.Validate(m); err == nil {
				t.Errorf("the schema accepts a plan with %s", name)
			}
		})
	}
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
			p.StyrminVersion = testStyrminVersion
			var jsonOut []byte
			for _, f := range Formats() {
				var buf bytes.Buffer
				if err := Render(&buf, p, f, RenderOptions{}); err != nil {
					t.Fatal(err)
				}
				if f == FormatYAML {
					sameAsJSON(t, jsonOut, buf.Bytes())
					continue
				}
				ext := map[Format]string{FormatText: "txt", FormatMarkdown: "md", FormatJSON: "json"}[f]
				golden(t, fmt.Sprintf("%s.%s", sc.name, ext), buf.Bytes())
				if f == FormatJSON {
					validatePlanJSON(t, buf.Bytes())
					jsonOut = buf.Bytes()
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

// validatePlanJSON validates the output against plan.schema.json and
// decodes it strictly into the documented Go types.
func validatePlanJSON(t *testing.T, data []byte) {
	t.Helper()
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("plan output is not JSON: %v", err)
	}
	if err := planSchema(t).Validate(inst); err != nil {
		t.Fatalf("plan JSON does not match plan.schema.json: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Plan
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("plan JSON does not decode into planner.Plan: %v", err)
	}
}

func planSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(JSONSchema()))
	if err != nil {
		t.Fatalf("plan.schema.json: %v", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("plan.schema.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("plan.schema.json")
	if err != nil {
		t.Fatalf("plan.schema.json does not compile: %v", err)
	}
	return s
}

func TestLockChangesMatchPlanLocks(t *testing.T) {
	base := lockedExample(t)
	head := copyTree(t, base)
	// A change, a creation and a deletion at once.
	scenarios[0].change(t, head)
	scenarios[2].change(t, head)
	scenarios[3].change(t, head)
	in := loadInput(t, base, head)
	want, err := resolver.PlanLocks(in.Head, in.Base)
	if err != nil {
		t.Fatal(err)
	}
	got, err := resolver.NextInstances(in.Head, in.Base)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || len(got) != len(want) {
		t.Fatalf("%d changes, PlanLocks has %d, want 3", len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.ID != w.ID || g.Previous != w.Previous || g.Next.Sequence != w.Next.Sequence || g.Next.Kind != w.Next.Kind || (!w.Next.Tombstone() && g.Next.Digest != w.Next.Digest) {
			t.Errorf("change %d: %s seq %d %s, PlanLocks: %s seq %d %s", i, g.ID, g.Next.Sequence, g.Next.Kind, w.ID, w.Next.Sequence, w.Next.Kind)
		}
	}
}

func TestTextIsColouredOnlyWhenAsked(t *testing.T) {
	base := lockedExample(t)
	head := copyTree(t, base)
	scenarios[0].change(t, head)
	p := computePlan(t, base, head, Options{})
	for _, color := range []bool{false, true} {
		var buf bytes.Buffer
		if err := RenderText(&buf, p, RenderOptions{Color: color}); err != nil {
			t.Fatal(err)
		}
		if got := bytes.Contains(buf.Bytes(), []byte("\x1b[")); got != color {
			t.Errorf("Color=%v: ANSI escapes present = %v", color, got)
		}
	}
}

func TestMarkdownStaysWithinItsSizeBudget(t *testing.T) {
	repo := generateFanOutRepo(t, 2, 6)
	p, err := Compute(repo.input, Options{})
	if err != nil {
		t.Fatal(err)
	}
	var full, small bytes.Buffer
	if err := RenderMarkdown(&full, p, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	budget := full.Len() / 3
	if err := RenderMarkdown(&small, p, RenderOptions{MaxBytes: budget}); err != nil {
		t.Fatal(err)
	}
	// The summary table is always complete; details stop at the budget.
	if small.Len() > budget+400 {
		t.Errorf("markdown is %d bytes with a budget of %d", small.Len(), budget)
	}
	if !strings.Contains(small.String(), "are left out to keep this comment short") {
		t.Errorf("no note about the details left out")
	}
	for _, d := range p.Deployments {
		if !strings.Contains(small.String(), "`"+d.ID+"`") {
			t.Errorf("summary table lacks %s", d.ID)
		}
	}
}

// TestHeldDeploymentsAreShownNotCountedUnchanged: a deployment on hold
// whose file changed, and a new deployment created on hold, appear in the
// plan as held with their reasons (JSON, text, markdown), each with a
// change waiting, and neither is counted unchanged or planned.
func TestHeldDeploymentsAreShownNotCountedUnchanged(t *testing.T) {
	base := lockedExample(t)
	head := copyTree(t, base)
	writeFile(t, head, devHub, "driver:     \"graphhub\"\nappVersion: \"1.4.0\"\nconnects: [\"web\"]\nhold: \"restore in progress\"\nparameters: {\n\tworkers: 3\n\tdatabasePassword: {name: \"hub-db\", key: \"password\"}\n}\n")
	writeFile(t, head, "clusters/local/environments/dev/deployments/new.cue", "driver: \"webapp\"\nappVersion: \"1.25.0\"\nhold: \"not yet\"\n")
	cluster, err := os.ReadFile(filepath.Join(head, clusterCue))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, head, clusterCue, strings.Replace(string(cluster), `logLevel: "info"`, `logLevel: "warning"`, 1))

	p := computePlan(t, base, head, Options{})
	want := []Held{{ID: "local/dev/hub", Reason: "restore in progress", Waiting: true}, {ID: "local/dev/new", Reason: "not yet", Waiting: true}}
	if len(p.Held) != 2 || p.Held[0] != want[0] || p.Held[1] != want[1] {
		t.Fatalf("held %+v, want %+v", p.Held, want)
	}
	for _, d := range p.Deployments {
		if d.ID == "local/dev/hub" || d.ID == "local/dev/new" {
			t.Errorf("a held deployment is planned: %s", d.ID)
		}
	}
	var text, md bytes.Buffer
	if err := RenderText(&text, p, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := RenderMarkdown(&md, p, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	for name, out := range map[string]string{"text": text.String(), "markdown": md.String()} {
		if !strings.Contains(out, "Held") || !strings.Contains(out, "local/dev/hub") || !strings.Contains(out, "restore in progress (a change waits)") {
			t.Errorf("%s output does not show the held deployments:\n%s", name, out)
		}
	}
}

// TestALockWithAClearValueIsShownWithPlaceholders plans against a lock
// written while the parameter was not yet sensitive (its value is in
// clear in the lockfile): the locked side is rendered from a copy with
// placeholders, so neither value shows in any form, in any format.
func TestALockWithAClearValueIsShownWithPlaceholders(t *testing.T) {
	base := copyTree(t, exampleDir)
	// The chart shows the message transformed, as charts do.
	const cm = "drivers/webapp/1.1.0/chart/templates/configmap.yaml"
	writeFile(t, base, cm, readFile(t, base, cm)+"  shout: {{ .Values.message | upper | quote }}\n  b64: {{ .Values.message | b64enc | quote }}\n  b64b64: {{ .Values.message | b64enc | b64enc | quote }}\n  query: {{ .Values.message | urlquery | quote }}\n")
	writeFile(t, base, devWeb, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \""+oldSecret+"\"}\n")
	lockInto(t, base)
	if !strings.Contains(readFile(t, base, "locks/local/dev/web.lock.yaml"), oldSecret) {
		t.Fatal("the test needs a lock with the value in clear")
	}
	head := copyTree(t, base)
	sensitiveWebapp(t, head)
	writeFile(t, head, devWeb, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 2, message: \""+newSecret+"\"}\n")
	p := computePlan(t, base, head, Options{})
	for _, f := range Formats() {
		var buf bytes.Buffer
		if err := Render(&buf, p, f, RenderOptions{Full: true}); err != nil {
			t.Fatal(err)
		}
		if found := secrettest.Find(buf.Bytes(), oldSecret, newSecret); len(found) > 0 {
			t.Errorf("%s output contains %s", f, strings.Join(found, ", "))
		}
	}
}

// testStyrminVersion is the tool version the golden plans carry.
const testStyrminVersion = "v0.0.0-test"

// sameAsJSON checks that the YAML output holds what the JSON output does.
func sameAsJSON(t *testing.T, jsonOut, yamlOut []byte) {
	t.Helper()
	converted, err := yaml.YAMLToJSON(yamlOut)
	if err != nil {
		t.Fatalf("the YAML plan does not parse: %v", err)
	}
	var a, b any
	if err := json.Unmarshal(jsonOut, &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(converted, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("the YAML plan differs from the JSON plan:\n%s", yamlOut)
	}
}

func TestPlanJSONKeepsAngleBracketsAndAmpersandsVerbatim(t *testing.T) {
	p := &Plan{SchemaVersion: SchemaVersion, Head: "a<b&c>", StyrminVersion: testStyrminVersion}
	var buf bytes.Buffer
	if err := RenderJSON(&buf, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(buf.Bytes(), []byte(`"head": "a<b&c>"`)) || !bytes.Contains(buf.Bytes(), []byte(`"styrmin_version": "v0.0.0-test"`)) {
		t.Fatalf("JSON:\n%s", buf.Bytes())
	}
	var back Plan
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil || back.Head != "a<b&c>" {
		t.Fatalf("round trip: %q, %v", back.Head, err)
	}
}

// TestABackupFirstChangeIsAValidPlan: turning backupBeforeUpgrade on
// changes what a deployment's upgrades do (a backup first), and the plan
// shows it as a change of path backupFirst, which the JSON schema
// refused (only context and values paths).
func TestABackupFirstChangeIsAValidPlan(t *testing.T) {
	base := lockedExample(t)
	head := copyTree(t, base)
	writeFile(t, head, "clusters/local/environments/staging/deployments/hub.cue",
		"driver: {name: \"graphhub\", version: \"1.0.0\"}\nappVersion: \"1.4.0\"\nbackupBeforeUpgrade: true\nparameters: {\n\tlogLevel: \"warning\"\n\tdatabasePassword: {name: \"hub-db\", key: \"password\"}\n}\nconfig: logLevel: \"warn\"\n")
	p := computePlan(t, base, head, Options{})
	found := false
	for _, d := range p.Deployments {
		for _, c := range d.Changes {
			found = found || c.Path == "backupFirst"
		}
	}
	if !found {
		t.Fatalf("no change of backupFirst in the plan: %+v", p.Deployments)
	}
	var buf bytes.Buffer
	if err := Render(&buf, p, FormatJSON, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	validatePlanJSON(t, buf.Bytes())
}

// TestAMarkdownPlanNamesEveryDeletion: the markdown table stops after
// maxTableRows; a deletion sorted past it was only counted ("1 to
// delete"), and a reviewer could not tell which deployment goes.
func TestAMarkdownPlanNamesEveryDeletion(t *testing.T) {
	p := &Plan{SchemaVersion: SchemaVersion, Base: "main", Head: "working tree"}
	for i := range maxTableRows + 50 {
		p.Deployments = append(p.Deployments, &Deployment{ID: fmt.Sprintf("local/env%03d/web", i), Workflow: WorkflowUpdate})
		p.Summary.Update++
	}
	p.Deployments = append(p.Deployments, &Deployment{ID: "local/zz-env/hub", Workflow: WorkflowDelete})
	p.Summary.Delete++
	var buf bytes.Buffer
	if err := Render(&buf, p, FormatMarkdown, RenderOptions{}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "local/zz-env/hub") {
		t.Fatalf("the markdown plan does not name the deleted deployment:\n%s", buf.String()[max(0, buf.Len()-600):])
	}
}

// TestAPolicyChangeIsTheEnvironmentFilesCause: an environment's policy
// reaches its deployments' contexts, and a change of it redeploys them;
// the loader moves policy: out of the layer's settings, so the cause fell
// back to each deployment's own file, which had not changed.
func TestAPolicyChangeIsTheEnvironmentFilesCause(t *testing.T) {
	base := lockedExample(t)
	head := copyTree(t, base)
	const env = "clusters/local/environments/dev/environment.cue"
	data, err := os.ReadFile(filepath.Join(head, env))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, head, env, string(data)+"policy: kinds: [\"*\"]\n")
	p := computePlan(t, base, head, Options{})
	if len(p.Deployments) == 0 {
		t.Fatal("a policy change redeploys nothing")
	}
	for _, d := range p.Deployments {
		if len(d.Causes) != 1 || d.Causes[0].Kind != CauseEnvironment || d.Causes[0].File != env {
			t.Errorf("%s: causes %+v, want the environment's file %s", d.ID, d.Causes, env)
		}
	}
}
