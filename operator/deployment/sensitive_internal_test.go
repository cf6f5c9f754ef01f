package deployment

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/internal/outcome"
	"github.com/styrmin/styrmin/resolver"
)

// sensitiveFrom is a driver source whose Sensitive fails with err.
type sensitiveFrom struct{ err error }

func (s sensitiveFrom) Driver(context.Context, driversource.Request) (*drivers.Driver, error) {
	return nil, errors.New("not asked")
}

func (s sensitiveFrom) Sensitive(context.Context, *resolver.Instance, *drivers.Driver) (resolver.Sensitive, error) {
	return nil, s.err
}

// TestSensitiveValuesAtACommitNotFetchedAreRetriedNotStalled: the values
// of sensitive parameters are read at the instance's commit; one the
// clone could not fetch (a git host down or stalled during a leader
// handover) stalled the deployment "until a new instance is locked in
// git", though nothing in git was wrong. It is retried after the
// catch-up's interval; a value git does not give stays stalled.
func TestSensitiveValuesAtACommitNotFetchedAreRetriedNotStalled(t *testing.T) {
	id := resolver.ID{Cluster: "eu", Environment: "prod", Name: "web"}
	in := &resolver.Instance{ID: id, Context: &drivers.Context{Parameters: map[string]any{
		"password": resolver.Placeholder(id, "password", "s3cret"),
	}}}
	d := &drivers.Driver{Name: "web", Version: "1.0.0"}
	for _, c := range []struct {
		name string
		err  error
		want outcome.Outcome
	}{
		{"not fetched", fmt.Errorf("sensitive parameters of eu/prod/web at abc: %w", gitsource.ErrNotFetched),
			outcome.Outcome{Kind: outcome.Retry, Reason: v1alpha1.ReasonRenderFailed, After: outcome.NotFetchedDelay}},
		{"not what git gives", errors.New("at abc: parameter password: the value does not match its placeholder"),
			outcome.Outcome{Kind: outcome.Stall, Reason: v1alpha1.ReasonRenderFailed}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &Reconciler{drivers: sensitiveFrom{err: c.err}}
			_, err := r.sensitiveValues(context.Background(), in, d, nil)
			if got := outcome.Map(err, v1alpha1.ReasonApplyFailed); got != c.want {
				t.Fatalf("%v: %+v, want %+v", err, got, c.want)
			}
		})
	}
}
