package release

import (
	"testing"

	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestReleaseManifestIsHelmsFormatInInstallOrder pins the manifest
// recorded on a revision: Helm's install order (a ConfigMap before the
// Deployment that mounts it, an unknown kind last), a "# Source:" line
// naming each object's component, and the driver's YAML as rendered.
func TestReleaseManifestIsHelmsFormatInInstallOrder(t *testing.T) {
	t.Parallel()
	m := releaseManifest([]drivers.Object{
		{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", Component: "web",
			YAML: []byte("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n")},
		{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", Namespace: "dev-web", Component: "web",
			YAML: []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: dev-web\nspec:\n  replicas: 2\n")},
		{APIVersion: "v1", Kind: "ConfigMap", Name: "web-content", Namespace: "dev-web",
			YAML: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-content\n  namespace: dev-web\ndata:\n  message: hi\n")},
	})
	want := "---\n# Source: shared/configmap-web-content.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-content\n  namespace: dev-web\ndata:\n  message: hi\n" +
		"---\n# Source: web/deployment-web.yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: dev-web\nspec:\n  replicas: 2\n" +
		"---\n# Source: web/widget-w.yaml\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n"
	if m != want {
		t.Fatalf("manifest:\n%s\nwant:\n%s", m, want)
	}
	if docs := releaseutil.SplitManifests(m); len(docs) != 3 {
		t.Fatalf("Helm splits the manifest into %d documents, want 3", len(docs))
	}
}

func TestReleaseChartRecordsTheDriver(t *testing.T) {
	t.Parallel()
	ch := releaseChart(Request{Driver: v1alpha1.DriverRef{Name: "webapp", Version: "1.1.0", Digest: "sha256:x"}, AppVersion: "1.25.0"})
	if err := ch.Validate(); err != nil {
		t.Fatalf("chart does not validate: %v", err)
	}
	if ch.Name() != "webapp" || ch.Metadata.Version != "1.1.0" || ch.AppVersion() != "1.25.0" ||
		ch.Metadata.Annotations[driverDigestAnnotation] != "sha256:x" || len(ch.Templates) != 0 {
		t.Fatalf("chart metadata = %+v", ch.Metadata)
	}
}
