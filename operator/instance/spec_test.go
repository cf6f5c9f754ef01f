package instance

import (
	"encoding/json"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/resolver"
)

func testInstance(t *testing.T) *resolver.Instance {
	t.Helper()
	in := &resolver.Instance{
		APIVersion: resolver.APIVersion, Kind: resolver.KindInstance,
		ID:       resolver.ID{Cluster: "local", Environment: "dev", Name: "web"},
		Sequence: 7, SourceCommit: "abc",
		Driver:     resolver.DriverRef{Name: "webapp", Version: "1.1.0", Digest: "sha256:" + strings.Repeat("b", 64)},
		AppVersion: "1.25.0",
		Context: &drivers.Context{
			Cluster:     drivers.ClusterContext{Name: "local", Domain: "example.test"},
			Environment: drivers.EnvironmentContext{Name: "dev", Namespace: "dev"},
			Deployment:  drivers.DeploymentContext{Name: "web", Namespace: "dev-web", AppVersion: "1.25.0", Driver: "webapp", DriverVersion: "1.1.0"},
			Parameters:  map[string]any{"replicas": 2, "message": "<b>hi</b> & bye", "db": map[string]any{"name": "db", "key": "password"}},
		},
		Values: map[string]any{"replicaCount": 2, "ratio": 0.25, "big": int64(1) << 40, "list": []any{"a", true, nil}},
	}
	d, err := in.ComputeDigest()
	if err != nil {
		t.Fatal(err)
	}
	in.Digest = d
	return in
}

func TestInstanceRoundTripsThroughTheSpec(t *testing.T) {
	in := testInstance(t)
	spec, err := SpecFromInstance(in)
	if err != nil {
		t.Fatal(err)
	}
	// Through JSON, as the API server stores it.
	b, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Context, spec.Values = nil, nil
	if err := json.Unmarshal(b, &spec); err != nil {
		t.Fatal(err)
	}
	got, err := InstanceFromSpec(&spec)
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest != in.Digest || got.Sequence != 7 || got.ID != in.ID || got.Driver != in.Driver ||
		got.Context.Deployment.Namespace != "dev-web" || got.Values["replicaCount"] != float64(2) {
		t.Fatalf("round trip changed the instance: %+v", got)
	}
}

func TestInstanceFromSpecRefusesHandEdits(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(raw map[string]any)
		want string
	}{
		{"values edited", func(m map[string]any) { m["values"].(map[string]any)["replicaCount"] = 9 }, "spec.digest"},
		{"parameter edited", func(m map[string]any) {
			m["context"].(map[string]any)["parameters"].(map[string]any)["replicas"] = 9
		}, "spec.digest"},
		{"app version edited", func(m map[string]any) { m["appVersion"] = "9.9.9" }, "spec.digest"},
		{"unknown context field", func(m map[string]any) { m["context"].(map[string]any)["extra"] = 1 }, "spec.context"},
		{"context missing", func(m map[string]any) { delete(m, "context") }, "spec.context: missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec, err := SpecFromInstance(testInstance(t))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := json.Marshal(spec)
			var raw map[string]any
			if err := json.Unmarshal(b, &raw); err != nil {
				t.Fatal(err)
			}
			tc.edit(raw)
			b, _ = json.Marshal(raw)
			spec.Context, spec.Values = nil, nil
			if err := json.Unmarshal(b, &spec); err != nil {
				t.Fatal(err)
			}
			_, err = InstanceFromSpec(&spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

func TestTombstoneNeedsNoContext(t *testing.T) {
	in := &resolver.Instance{APIVersion: resolver.APIVersion, Kind: resolver.KindTombstone,
		ID: resolver.ID{Cluster: "c", Environment: "e", Name: "n"}, Sequence: 3}
	in.Digest, _ = in.ComputeDigest()
	spec, err := SpecFromInstance(in)
	if err != nil {
		t.Fatal(err)
	}
	if spec.Context != nil || spec.Values != nil || !spec.Tombstone() {
		t.Fatalf("tombstone spec = %+v", spec)
	}
	if _, err := InstanceFromSpec(&spec); err != nil {
		t.Fatal(err)
	}
	spec.Values = &apiextensionsv1.JSON{Raw: []byte(`[1]`)}
	if _, err := InstanceFromSpec(&spec); err == nil || !strings.Contains(err.Error(), "spec.values") {
		t.Fatalf("values as a list: err = %v", err)
	}
}
