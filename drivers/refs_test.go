package drivers

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"testing"

	"cuelang.org/go/cue"
)

// TestNarrowedContextEvaluatesAsTheWholeContext pins that filling only
// the context fields a spec selects gives every example driver's values,
// services, components and patches exactly as filling the whole context
// does: with a context that has every field set (configuration, a policy,
// a clone source, services of siblings) and with one whose optional
// fields are empty, which a spec may test for (`!= _|_`).
func TestNarrowedContextEvaluatesAsTheWholeContext(t *testing.T) {
	cat := loadExamples(t)
	roots := map[string][]string{"values": {"values"}, "services": {"services"}, "render": {"components", "patches"}}
	for _, name := range cat.Names() {
		for _, d := range cat.Versions(name) {
			full := exampleContext(d)
			full.Cluster.Config = map[string]any{"logFormat": "json", "tier": map[string]any{"name": "gold"}}
			full.Cluster.DedicatedIngress = true
			full.Environment.Config = map[string]any{"logLevel": "debug"}
			full.Environment.Policy = &Policy{Namespaces: []string{"shared"}, Kinds: []string{"*"}}
			full.Environment.ClonedFrom = &CloneSource{Cluster: "eu-1", Environment: "prod", Backup: "b-1"}
			sparse := exampleContext(d)
			sparse.Environment.BackupLocation = ""
			sparse.Cluster.StorageClasses = nil
			sparse.Services = nil
			for cname, c := range map[string]Context{"full": full, "sparse": sparse} {
				for pname, p := range map[string]projection{"values": d.compiled.valuesProj, "services": d.compiled.servicesProj, "render": d.compiled.renderProj} {
					whole := p
					whole.keys.selectsOnly = false
					narrowed, all := p.eval(c), whole.eval(c)
					for _, r := range roots[pname] {
						path := cue.ParsePath(r)
						got, want := fmt.Sprint(narrowed.LookupPath(path)), fmt.Sprint(all.LookupPath(path))
						if got != want {
							t.Errorf("%s@%s, %s context, %s: narrowed\n%s\nwhole\n%s", d.Name, d.Version, cname, r, got, want)
						}
					}
				}
			}
		}
	}
}

// TestPickedFieldsAreThoseJSONKeeps pins pickFields to the encoding CUE
// and encoding/json give a context struct: the same names, and the empty
// omitempty fields left out, set or not.
func TestPickedFieldsAreThoseJSONKeeps(t *testing.T) {
	set := Context{
		Cluster: ClusterContext{Name: "eu-1", Domain: "d", IngressClass: "nginx", DedicatedIngress: true,
			StorageClasses: map[string]string{"default": "standard"}, Config: map[string]any{"a": 1}},
		Environment: EnvironmentContext{Name: "prod", Namespace: "prod", BackupLocation: "s3://b", Config: map[string]any{"b": 2},
			ClonedFrom: &CloneSource{Cluster: "eu-1"}, Policy: &Policy{Kinds: []string{"*"}}},
		Deployment: DeploymentContext{Name: "web", Namespace: "prod-web", AppVersion: "1.0.0", Driver: "webapp", DriverVersion: "1.1.0"},
	}
	for _, c := range []Context{set, {}} {
		for _, part := range []any{c.Cluster, c.Environment, c.Deployment} {
			j, err := json.Marshal(part)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(j, &m); err != nil {
				t.Fatal(err)
			}
			all := map[string]bool{}
			for _, f := range structFields(reflect.TypeOf(part)) {
				all[f.name] = true
			}
			picked := pickFields(part, all)
			if got, want := slices.Sorted(maps.Keys(picked)), slices.Sorted(maps.Keys(m)); !slices.Equal(got, want) {
				t.Errorf("%T: picked %v, JSON keeps %v", part, got, want)
			}
		}
	}
}
