package task

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestBoundOutputKeepsTheTailAndSaysItWasCut(t *testing.T) {
	if got := boundOutput("short", 64); got != "short" {
		t.Errorf("short output changed: %q", got)
	}
	long := strings.Repeat("a", 100) + "THE END"
	got := boundOutput(long, 64)
	if len(got) > 64 || !strings.HasPrefix(got, "[truncated: the last 64 of 107 bytes]") || !strings.HasSuffix(got, "THE END") {
		t.Errorf("boundOutput = %q (%d bytes), want at most 64 bytes, a marker and the tail", got, len(got))
	}
}

// refusingReader answers every read as the API server refuses an account
// without rights on Secrets: the one failure redact must not turn into
// unmasked output.
type refusingReader struct{ client.Reader }

func (refusingReader) Get(context.Context, client.ObjectKey, client.Object, ...client.GetOption) error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, v1alpha1.SensitiveSecretName, errors.New("no rights"))
}

func TestOutputIsWithheldWhenTheSensitiveValuesCannotBeRead(t *testing.T) {
	r := &Reconciler{own: Actor{Reader: refusingReader{}}}
	run := &taskRun{
		task: &v1alpha1.StyrminTask{Spec: v1alpha1.StyrminTaskSpec{Namespace: "dev-web"}},
		instance: &resolver.Instance{Context: &drivers.Context{Parameters: map[string]any{
			"password": resolver.PlaceholderPrefix + strings.Repeat("ab", 32),
		}}},
	}
	got := r.redact(context.Background(), run, "the password is hunter2")
	if strings.Contains(got, "hunter2") || !strings.Contains(got, "withheld") || !strings.Contains(got, "forbidden") {
		t.Errorf("redact = %q, want the output withheld, saying why", got)
	}
}
