package release

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/resolver"
)

// refusalForms are the forms of v Mask hides (secrettest.MaskForms).
func refusalForms(v string) map[string]string { return secrettest.MaskForms(v) }

// refusalLeaks returns the forms of v that msg holds, but where they run
// into a Masked (constant text that shows nothing of the value).
func refusalLeaks(msg, v string) []string {
	inMasked := make([]int, len(msg)+1)
	covered := make([]bool, len(msg))
	for i := 0; ; i++ {
		j := strings.Index(msg[i:], resolver.Masked)
		if j < 0 {
			break
		}
		i += j
		for k := i; k < i+len(resolver.Masked); k++ {
			covered[k] = true
		}
	}
	for i, c := range covered {
		inMasked[i+1] = inMasked[i]
		if c {
			inMasked[i+1]++
		}
	}
	var leaks []string
	for name, f := range refusalForms(v) {
		for i := 0; f != "" && i+len(f) <= len(msg); i++ {
			j := strings.Index(msg[i:], f)
			if j < 0 {
				break
			}
			i += j
			if inMasked[i+len(f)] == inMasked[i] {
				leaks = append(leaks, fmt.Sprintf("%s %q at %d", name, f, i))
				break
			}
		}
	}
	return leaks
}

// refusal is an error as an API server's answer (or a client's) may
// quote value v, with text a and b around it; kind picks which.
func refusal(kind uint8, v, a, b string) error {
	quoted, _ := json.Marshal(map[string]string{"token": v})
	text := a + v + b
	switch kind % 8 {
	case 0:
		return errors.New(text)
	case 1:
		return fmt.Errorf("apply %s: %w", a, fmt.Errorf("%q: %s", v, b))
	case 2: // what the API server sends for a label value with a space
		return apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "b", field.ErrorList{
			field.Invalid(field.NewPath("metadata", "labels").Key("token"), v, a),
			field.Invalid(field.NewPath("data"), map[string]string{"k": v}, b),
		})
	case 3:
		return apierrors.NewInvalid(schema.GroupKind{Group: "apps", Kind: "Deployment"}, a, field.ErrorList{
			field.NotSupported(field.NewPath("spec").Key(v), v, []string{b, v}),
			field.Invalid(field.NewPath("spec", "x"), []string{a, v, b}, ""),
		})
	case 4:
		return &apierrors.StatusError{ErrStatus: metav1.Status{
			Status: metav1.StatusFailure, Code: 422, Reason: metav1.StatusReasonInvalid, Message: text,
			Details: &metav1.StatusDetails{Name: "b", Causes: []metav1.StatusCause{
				{Type: metav1.CauseTypeFieldValueInvalid, Message: "Invalid value: " + string(quoted), Field: "data"},
				{Type: metav1.CauseTypeFieldValueInvalid, Message: strconv.Quote(text), Field: "data"},
			}},
		}}
	case 5: // a status wrapped by who called
		return fmt.Errorf("%s: %w", text, apierrors.NewBadRequest(fmt.Sprintf("%s %q %s", a, v, quoted)))
	case 6:
		return apierrors.NewConflict(schema.GroupResource{Resource: "configmaps"}, a, errors.New(text))
	default:
		return apierrors.NewForbidden(schema.GroupResource{Resource: "secrets"}, v, fmt.Errorf("%s%s", quoted, b))
	}
}

// FuzzMaskRefusal: whatever the error a request revealing a sensitive
// value gets back (a plain or wrapped error, an Invalid status quoting
// the value as a string, in JSON or in a field path, a status with
// causes) and whatever text surrounds the value, the error maskRefusal
// returns shows no form of the value in its Error() nor in its causes.
func FuzzMaskRefusal(f *testing.F) {
	for _, s := range []struct {
		secret, a, b string
		kind         uint8
	}{
		{"open sesame-quoted", "Invalid value: ", "", 2},
		{"open sesame-quoted", "prefix", "suffix", 0},
		{`Pa ss/w0rd+x&y"z` + "\nline two", "x", "y", 1},
		{`back\slash"quote`, `"`, `\`, 3},
		{"pässwörd-日本\u2028", "é", "", 4},
		{"s3cret", "s3", "cret", 5},
		{"aaaa", "a", "aaa", 6},
		{"tok<&>en", "", "", 7},
		{"ve)q", "", "q", 4},
	} {
		f.Add(s.secret, s.a, s.b, s.kind)
	}
	f.Fuzz(func(t *testing.T, secret, a, b string, kind uint8) {
		if len(secret) < 4 {
			return // see FuzzMask in resolver: real values are longer
		}
		values := resolver.Sensitive{resolver.Placeholder(resolver.ID{Cluster: "c", Environment: "e", Name: "d"}, "token", secret): secret}
		in := refusal(kind, secret, a, b)
		out := maskRefusal(in, values)
		if out == nil {
			t.Fatalf("maskRefusal(%v) = nil", in)
		}
		if leaks := refusalLeaks(out.Error(), secret); len(leaks) > 0 {
			t.Fatalf("maskRefusal's error shows %s\nin:  %q\nout: %q", strings.Join(leaks, ", "), in.Error(), out.Error())
		}
		var status apierrors.APIStatus
		if errors.As(out, &status) && status.Status().Details != nil {
			for _, c := range status.Status().Details.Causes {
				if leaks := refusalLeaks(c.Message, secret); len(leaks) > 0 {
					t.Fatalf("maskRefusal's cause %q shows %s", c.Message, strings.Join(leaks, ", "))
				}
			}
		}
	})
}
