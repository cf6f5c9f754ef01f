package drivers

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

func TestKindTable(t *testing.T) {
	if got, want := WorkloadKinds(), []string{"Deployment", "StatefulSet", "DaemonSet"}; !slices.Equal(got, want) {
		t.Errorf("WorkloadKinds() = %v, want %v", got, want)
	}
	if got, want := ScalableKinds(), []string{"Deployment", "StatefulSet"}; !slices.Equal(got, want) {
		t.Errorf("ScalableKinds() = %v, want %v", got, want)
	}
	// Which kinds are cluster-scoped is compared with a real API server's
	// discovery: TestKindTableMatchesTheAPIServer (operator/release).
	seen := map[string]bool{}
	for _, k := range Kinds() {
		if seen[k.Kind] {
			t.Errorf("kind %s is in the table twice", k.Kind)
		}
		seen[k.Kind] = true
		if k.Workload && k.ClusterScoped {
			t.Errorf("%s is both a workload and cluster-scoped", k.Kind)
		}
		if k.Scalable && !k.Workload {
			t.Errorf("%s scales but is no workload", k.Kind)
		}
	}
	// Kinds hands out a copy: changing it changes nothing.
	Kinds()[0].Workload = false
	if !IsWorkloadKind("apps/v1", Kinds()[0].Kind) {
		t.Error("changing the result of Kinds() changed the table")
	}

	tests := []struct {
		apiVersion, kind                string
		clusterScoped, workload, scales bool
	}{
		{"apps/v1", "Deployment", false, true, true},
		{"apps/v1", "StatefulSet", false, true, true},
		{"apps/v1", "DaemonSet", false, true, false},
		{"apps/v1", "ReplicaSet", false, false, false},
		{"batch/v1", "Job", false, false, false},
		{"batch/v1", "CronJob", false, false, false},
		{"v1", "Pod", false, false, false},
		{"v1", "ConfigMap", false, false, false},
		// A custom resource reusing a workload's name is not one.
		{"example.com/v1", "Deployment", false, false, true},
		{"v1", "Namespace", true, false, false},
		{"rbac.authorization.k8s.io/v1", "ClusterRole", true, false, false},
		{"apiextensions.k8s.io/v1", "CustomResourceDefinition", true, false, false},
		{"admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy", true, false, false},
		{"networking.k8s.io/v1", "ServiceCIDR", true, false, false},
		{"resource.k8s.io/v1", "DeviceClass", true, false, false},
		{"example.com/v1", "Widget", false, false, false},
	}
	for _, tc := range tests {
		if got := IsClusterScoped(tc.kind); got != tc.clusterScoped {
			t.Errorf("IsClusterScoped(%s) = %v, want %v", tc.kind, got, tc.clusterScoped)
		}
		if got := IsWorkloadKind(tc.apiVersion, tc.kind); got != tc.workload {
			t.Errorf("IsWorkloadKind(%s, %s) = %v, want %v", tc.apiVersion, tc.kind, got, tc.workload)
		}
		if got := CanScale(tc.kind); got != tc.scales {
			t.Errorf("CanScale(%s) = %v, want %v", tc.kind, got, tc.scales)
		}
	}
}

// TestComponentsOfKindsTheAgentCannotWaitForAreRefused pins that a
// component may only select the kinds the agent waits for, and that the
// error names the file and line, the component and the kinds supported.
func TestComponentsOfKindsTheAgentCannotWaitForAreRefused(t *testing.T) {
	const src = "drivers/mini/1.0.0/"
	for _, kind := range []string{"Job", "CronJob", "ReplicaSet", "Pod", "ConfigMap", "Widget"} {
		t.Run(kind, func(t *testing.T) {
			m := minimalFS()
			replaceSpec(`kind: "Deployment"`, `kind: "`+kind+`"`)(m)
			_, err := Load(m, LoadOptions{Source: "drivers/mini/1.0.0"})
			if err == nil {
				t.Fatal("loaded, want an error")
			}
			for _, want := range []string{
				src + "driver.cue:8:",
				"components.app.workloads[0].kind",
				`kind "` + kind + `" is not a workload kind the agent can wait for`,
				`component "app" may select Deployment, StatefulSet or DaemonSet`,
			} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			var se *SpecError
			if !errors.As(err, &se) {
				t.Errorf("error is %T, want a *SpecError", err)
			}
		})
	}
}

const daemonSetTemplate = `apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: busybox}]}
`

// daemonFS is the minimal driver with a second component, agent, made of
// a DaemonSet (and, with mixed, of the app's Deployment too), and actions
// replacing the minimal spec's.
func daemonFS(mixed bool, actions string) fstest.MapFS {
	m := minimalFS()
	m["chart/templates/daemonset.yaml"] = &fstest.MapFile{Data: []byte(daemonSetTemplate)}
	sel := `{kind: "DaemonSet", name: "agent"}`
	if mixed {
		sel = `{kind: "Deployment", name: "other"}, ` + sel
	}
	replaceSpec(`components: app:`, "components: agent: workloads: ["+sel+"]\ncomponents: app:")(m)
	replaceSpec(`actions: upgrade: post: [{action: "waitReady", components: ["app"]}]`, actions)(m)
	return m
}

// TestStopAndStartOfComponentsThatDoNotScaleAreRefused pins that a step
// scaling a component is refused at load when one of the component's
// selectors names a kind that has no replicas (a DaemonSet), while
// waiting for such a component is fine.
func TestStopAndStartOfComponentsThatDoNotScaleAreRefused(t *testing.T) {
	const file = "drivers/mini/1.0.0/driver.cue:12:"
	tests := []struct {
		name      string
		mixed     bool
		actions   string
		wantField string // "" when the driver loads
		wantMsg   string
	}{
		{name: "stop a DaemonSet", actions: `actions: upgrade: pre: [{action: "stopComponents", components: ["agent"]}]`,
			wantField: "actions.upgrade.pre[0].components",
			wantMsg:   `component "agent" selects DaemonSet workloads, which stopComponents cannot scale (it scales only Deployment and StatefulSet)`},
		{name: "start a DaemonSet among others", actions: `actions: setup: post: [{action: "startComponents", components: ["app", "agent"]}]`,
			wantField: "actions.setup.post[0].components",
			wantMsg:   `component "agent" selects DaemonSet workloads, which startComponents cannot scale`},
		{name: "stop a component with a Deployment and a DaemonSet", mixed: true,
			actions:   `actions: upgrade: pre: [{action: "waitReady", components: ["app"]}, {action: "stopComponents", components: ["agent"]}]`,
			wantField: "actions.upgrade.pre[1].components", wantMsg: `component "agent" selects DaemonSet workloads`},
		{name: "wait for a DaemonSet", actions: `actions: upgrade: post: [{action: "waitReady", components: ["agent", "app"]}]`},
		{name: "stop and start the Deployment only", actions: `actions: upgrade: {pre: [{action: "stopComponents", components: ["app"]}], post: [{action: "startComponents", components: ["app"]}]}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Load(daemonFS(tc.mixed, tc.actions), LoadOptions{Source: "drivers/mini/1.0.0"})
			if tc.wantField == "" {
				if err != nil {
					t.Fatalf("want the driver to load: %v", err)
				}
				if len(d.Components) != 2 {
					t.Errorf("components = %+v", d.Components)
				}
				return
			}
			if err == nil {
				t.Fatal("loaded, want an error")
			}
			for _, want := range []string{file, tc.wantField, tc.wantMsg} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
		})
	}
}

// TestCustomResourceNamedLikeAWorkloadIsNoWorkload pins that rendering
// takes the API version into account: an example.com Deployment is not
// selected by a component's Deployment selector.
func TestCustomResourceNamedLikeAWorkloadIsNoWorkload(t *testing.T) {
	m := minimalFS()
	m["chart/templates/custom.yaml"] = &fstest.MapFile{Data: []byte("apiVersion: example.com/v1\nkind: Deployment\nmetadata:\n  name: {{ .Release.Name }}\n")}
	d, err := Load(m, LoadOptions{Source: "drivers/mini/1.0.0"})
	if err != nil {
		t.Fatal(err)
	}
	c := exampleContext(d)
	vals, err := d.Values(c)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := d.Render(c, vals)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, o := range ms.Objects {
		got[o.APIVersion+" "+o.Kind] = o.Component
	}
	if got["apps/v1 Deployment"] != "app" || got["example.com/v1 Deployment"] != "" {
		t.Errorf("components by object = %v, want the apps/v1 Deployment in app and the custom one in none", got)
	}
}

func TestModesOrdered(t *testing.T) {
	pre := []Step{{Action: ActionStopComponents, Components: []string{"worker"}}}
	core := []Step{{Action: ActionUpgradeDeploymentVersion}}
	post := []Step{{Action: ActionStartComponents}, {Action: ActionWaitReady}}
	got := Modes{Pre: pre, Core: core, Post: post}.Ordered()
	if len(got) != 3 {
		t.Fatalf("Ordered() = %+v, want three modes", got)
	}
	for i, want := range []ModeSteps{{ModePre, pre}, {ModeCore, core}, {ModePost, post}} {
		if got[i].Mode != want.Mode || len(got[i].Steps) != len(want.Steps) || (len(want.Steps) > 0 && &got[i].Steps[0] != &want.Steps[0]) {
			t.Errorf("mode %d = %+v, want %+v", i, got[i], want)
		}
	}
	if names := ModeNames(); !slices.Equal(names, []string{"pre", "core", "post"}) {
		t.Errorf("ModeNames() = %v", names)
	}
	// Every mode is listed, with or without steps, so a walk sees all three.
	if got := (Modes{}).Ordered(); len(got) != 3 || got[1].Mode != ModeCore || got[1].Steps != nil {
		t.Errorf("empty Modes.Ordered() = %+v", got)
	}
}
