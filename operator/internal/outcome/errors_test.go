package outcome_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/outcome"
)

func TestErrorsAreClassifiedWhereTheyHappen(t *testing.T) {
	x := errors.New("x")
	for _, tc := range []struct {
		name    string
		err     error
		stalled bool
		reason  string
	}{
		{"stalled", outcome.Stalled(v1alpha1.ReasonRenderFailed, x), true, v1alpha1.ReasonRenderFailed},
		{"stalled, wrapped with context", fmt.Errorf("step: %w", outcome.Stalled(v1alpha1.ReasonDriverNotFound, x)), true, v1alpha1.ReasonDriverNotFound},
		{"retryable", outcome.Retryable(v1alpha1.ReasonApplyFailed, x), false, v1alpha1.ReasonApplyFailed},
		{"stalled inside retryable: no retry can fix it", outcome.Retryable(v1alpha1.ReasonApplyFailed, outcome.Stalled(v1alpha1.ReasonInvalidSpec, x)), true, v1alpha1.ReasonInvalidSpec},
		{"unclassified", errors.New("unclassified"), false, "Fallback"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, r := outcome.Classify(tc.err, "Fallback")
			if s != tc.stalled || r != tc.reason {
				t.Errorf("Classify(%v) = %v, %s; want %v, %s", tc.err, s, r, tc.stalled, tc.reason)
			}
			if outcome.IsStalled(tc.err) != tc.stalled {
				t.Errorf("IsStalled(%v) = %v", tc.err, !tc.stalled)
			}
			if tc.err.Error() != "x" && tc.err.Error() != "unclassified" && tc.err.Error() != "step: x" {
				t.Errorf("a classification changed the message: %q", tc.err.Error())
			}
		})
	}
}

// TestMapIsTheOneMappingFromErrorToOutcome pins what a controller does
// with each class of error.
func TestMapIsTheOneMappingFromErrorToOutcome(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "styrmintasks"}, "t", errors.New("stale"))
	for _, tc := range []struct {
		name string
		err  error
		want outcome.Outcome
	}{
		{"no error", nil, outcome.Outcome{Kind: outcome.None}},
		{"stalled", outcome.Stalled(v1alpha1.ReasonRenderFailed, errors.New("bad template")), outcome.Outcome{Kind: outcome.Stall, Reason: v1alpha1.ReasonRenderFailed}},
		{"a conflict retries at once", fmt.Errorf("writing: %w", conflict), outcome.Outcome{Kind: outcome.Conflict, Reason: "Fallback", After: outcome.ConflictDelay}},
		{"a classified conflict keeps its reason", outcome.Retryable(v1alpha1.ReasonApplyFailed, conflict), outcome.Outcome{Kind: outcome.Conflict, Reason: v1alpha1.ReasonApplyFailed, After: outcome.ConflictDelay}},
		{"retryable backs off", outcome.Retryable(v1alpha1.ReasonDriverUnavailable, errors.New("fetch")), outcome.Outcome{Kind: outcome.Retry, Reason: v1alpha1.ReasonDriverUnavailable}},
		{"retryable after a fixed delay", outcome.RetryableAfter(v1alpha1.ReasonApplyFailed, 3*time.Second, errors.New("busy")), outcome.Outcome{Kind: outcome.Retry, Reason: v1alpha1.ReasonApplyFailed, After: 3 * time.Second}},
		{"unclassified backs off with the fallback reason", errors.New("timeout"), outcome.Outcome{Kind: outcome.Retry, Reason: "Fallback"}},
		{"a commit the clone could not fetch retries after the catch-up's interval", outcome.Retryable(v1alpha1.ReasonDriverUnavailable, fmt.Errorf("driver web@1 at abc: %w", gitsource.ErrNotFetched)), outcome.Outcome{Kind: outcome.Retry, Reason: v1alpha1.ReasonDriverUnavailable, After: outcome.NotFetchedDelay}},
		{"unclassified, not fetched: the same", fmt.Errorf("lock web.cue: %w", gitsource.ErrNotFetched), outcome.Outcome{Kind: outcome.Retry, Reason: "Fallback", After: outcome.NotFetchedDelay}},
		{"a stalled conflict stalls", outcome.Stalled(v1alpha1.ReasonInvalidSpec, conflict), outcome.Outcome{Kind: outcome.Stall, Reason: v1alpha1.ReasonInvalidSpec}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outcome.Map(tc.err, "Fallback"); got != tc.want {
				t.Errorf("Map(%v) = %+v, want %+v", tc.err, got, tc.want)
			}
		})
	}
}

// TestAdmissionDeniedKnowsThePoliciesFromRBACAndQuotas: the API server's
// words for a webhook's and a ValidatingAdmissionPolicy's denial, whatever
// code they answer with, through the wraps an apply adds; RBAC's and a
// quota's 403s are no admission policy's.
func TestAdmissionDeniedKnowsThePoliciesFromRBACAndQuotas(t *testing.T) {
	svc := schema.GroupResource{Resource: "services"}
	webhook := &apierrors.StatusError{ErrStatus: apierrors.NewForbidden(svc, "web",
		errors.New(`admission webhook "validation.gatekeeper.sh" denied the request: [no-lb] no LoadBalancer`)).ErrStatus}
	badRequest := apierrors.NewBadRequest(`admission webhook "validate.kyverno.svc-fail" denied the request: policy require-labels`)
	vap := apierrors.NewForbidden(svc, "web", errors.New("ValidatingAdmissionPolicy 'no-lb' with binding 'no-lb' denied request: no LoadBalancer"))
	rbac := apierrors.NewForbidden(svc, "web", errors.New(`User "system:serviceaccount:a:b" cannot patch resource "services" in API group "" in the namespace "a"`))
	quota := apierrors.NewForbidden(svc, "web", errors.New("exceeded quota: q, requested: services=1, used: services=0, limited: services=0"))
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"a webhook's 403, wrapped", fmt.Errorf("apply Service/a/web: %w", webhook), true},
		{"a webhook's 400", badRequest, true},
		{"a ValidatingAdmissionPolicy's", vap, true},
		{"RBAC's", rbac, false},
		{"a quota's", quota, false},
		{"no API server's", errors.New(`admission webhook "x" denied the request`), false},
		{"none", nil, false},
	} {
		if got := outcome.AdmissionDenied(tc.err); got != tc.want {
			t.Errorf("%s: AdmissionDenied(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
