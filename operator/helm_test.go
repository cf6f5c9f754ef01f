package operator

import (
	"bytes"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestPostRendererHandsHelmTheRenderedObjects pins that the post-renderer
// ignores Helm's own output and yields the driver's objects, each named
// after its component.
func TestPostRendererHandsHelmTheRenderedObjects(t *testing.T) {
	pr := &renderedObjects{objects: []drivers.Object{
		{APIVersion: "v1", Kind: "ConfigMap", Name: "web-content", Namespace: "dev-web", Component: "",
			YAML: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web-content\n  namespace: dev-web\ndata:\n  message: hi\n")},
		{APIVersion: "apps/v1", Kind: "Deployment", Name: "web", Namespace: "dev-web", Component: "web",
			YAML: []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: dev-web\nspec:\n  replicas: 2\n")},
	}}
	out, err := pr.Run(bytes.NewBufferString("apiVersion: v1\nkind: Secret\nmetadata:\n  name: from-helm\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := out.String()
	if strings.Contains(s, "from-helm") {
		t.Fatal("Helm's own rendering leaked into the output")
	}
	for _, want := range []string{
		postRenderFilenameAnnotation + ": 'shared/configmap-web-content.yaml'",
		postRenderFilenameAnnotation + ": 'web/deployment-web.yaml'",
		"message: hi", "replicas: 2",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if _, err := (&renderedObjects{objects: []drivers.Object{{Kind: "X", Name: "y", YAML: []byte("a: [")}}}).Run(nil); err == nil {
		t.Fatal("no error for an object that is not YAML")
	}
}

func TestReleaseChartRecordsTheDriver(t *testing.T) {
	ch := releaseChart(releaseRequest{Driver: v1alpha1.DriverRef{Name: "webapp", Version: "1.1.0", Digest: "sha256:x"}, AppVersion: "1.25.0"})
	if err := ch.Validate(); err != nil {
		t.Fatalf("chart does not validate: %v", err)
	}
	if ch.Name() != "webapp" || ch.Metadata.Version != "1.1.0" || ch.AppVersion() != "1.25.0" ||
		ch.Metadata.Annotations[driverDigestAnnotation] != "sha256:x" || len(ch.Templates) != 0 {
		t.Fatalf("chart metadata = %+v", ch.Metadata)
	}
}

func TestErrorsAreClassifiedWhereTheyHappen(t *testing.T) {
	wrapped := func(err error) error { return &wrapErr{err} }
	for _, tc := range []struct {
		err     error
		stalled bool
		reason  string
	}{
		{stalled(v1alpha1.ReasonRenderFailed, errString("x")), true, v1alpha1.ReasonRenderFailed},
		{wrapped(stalled(v1alpha1.ReasonDriverNotFound, errString("x"))), true, v1alpha1.ReasonDriverNotFound},
		{retryable(v1alpha1.ReasonApplyFailed, errString("x")), false, v1alpha1.ReasonApplyFailed},
		{errString("unclassified"), false, "Fallback"},
	} {
		s, r := classify(tc.err, "Fallback")
		if s != tc.stalled || r != tc.reason {
			t.Errorf("classify(%v) = %v, %s; want %v, %s", tc.err, s, r, tc.stalled, tc.reason)
		}
	}
}

type errString string

func (e errString) Error() string { return string(e) }

type wrapErr struct{ err error }

func (e *wrapErr) Error() string { return "wrapped: " + e.err.Error() }
func (e *wrapErr) Unwrap() error { return e.err }
