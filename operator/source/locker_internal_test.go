package source

import (
	"errors"
	"fmt"
	"testing"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/resolver"
)

// TestOnlyTheMachinesTroubleLocksTheSameHeadAgain: deployments a lock
// left unlocked because a sandbox child could not start (a process limit,
// for one render among many) are locked on the next round though the head
// has not moved; those whose configuration or driver is at fault wait for
// the next head, which the same head would fail alike.
func TestOnlyTheMachinesTroubleLocksTheSameHeadAgain(t *testing.T) {
	web := resolver.ID{Cluster: "local", Environment: "dev", Name: "web"}
	hub := resolver.ID{Cluster: "local", Environment: "dev", Name: "hub"}
	start := fmt.Errorf("driver webapp: %w: fork/exec: resource temporarily unavailable", drivers.ErrSandboxStart)
	bad := &resolver.ConfigError{File: "deployments/hub.cue", Field: "parameters.workers", Msg: "expected an integer"}
	for _, c := range []struct {
		name    string
		skipped error
		again   bool
	}{
		{"nothing skipped", nil, false},
		{"a render whose sandbox could not start", &resolver.DeploymentError{ID: web, Err: start}, true},
		{"among configuration errors", errors.Join(&resolver.DeploymentError{ID: hub, Err: bad}, &resolver.DeploymentError{ID: web, Err: start}), true},
		{"a configuration error", &resolver.DeploymentError{ID: hub, Err: bad}, false},
		{"a driver past its memory limit", &resolver.DeploymentError{ID: hub, Err: &drivers.LimitError{Limit: drivers.LimitMemory}}, false},
	} {
		if got := transient(c.skipped); got != c.again {
			t.Errorf("%s: locked again %v, want %v", c.name, got, c.again)
		}
	}
}
