package task

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/internal/outcome"
)

// Actor is what a task's actions change the cluster with, all as one
// identity: the writes to workloads (scaling) and Jobs, exec into pods
// and their logs, and the uncached read of the deployment's sensitive
// Secret. Reads of workloads, pods and Jobs for health stay the agent's
// own (its cache, read-only rights everywhere).
type Actor struct {
	// User is the impersonated user ("": the agent's own identity).
	User   string
	Writer client.Writer
	Reader client.Reader
	Exec   PodExecutor
	Logs   PodLogs
}

// describe names the identity in messages.
func (a Actor) describe() string {
	if a.User == "" {
		return "the agent's own identity"
	}
	return a.User + " (the environment's policy.serviceAccountName)"
}

// Impersonator gives the Actor of a user: the service account an
// environment's policy names.
type Impersonator interface {
	As(user string) (Actor, error)
}

// Impersonation builds Actors that act as a user through Kubernetes
// impersonation, from the agent's own client configuration, once per
// user, so the cluster's RBAC for that user bounds what a driver's
// actions can do (as it bounds the release: release.Releases.As).
type Impersonation struct {
	cfg    *rest.Config
	scheme *runtime.Scheme
	mapper meta.RESTMapper

	mu     sync.Mutex
	byUser map[string]Actor
}

var _ Impersonator = (*Impersonation)(nil)

// NewImpersonation returns the Impersonation over the agent's
// configuration; scheme and mapper are the manager's.
func NewImpersonation(cfg *rest.Config, scheme *runtime.Scheme, mapper meta.RESTMapper) *Impersonation {
	return &Impersonation{cfg: rest.CopyConfig(cfg), scheme: scheme, mapper: mapper, byUser: map[string]Actor{}}
}

// As returns the Actor of user, building its clients the first time.
func (i *Impersonation) As(user string) (Actor, error) {
	if user == "" {
		return Actor{}, errors.New("impersonation: no user to act as")
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if a, ok := i.byUser[user]; ok {
		return a, nil
	}
	cfg := rest.CopyConfig(i.cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: i.scheme, Mapper: i.mapper})
	if err != nil {
		return Actor{}, fmt.Errorf("client acting as %s: %w", user, err)
	}
	pods, err := NewKubePods(cfg)
	if err != nil {
		return Actor{}, fmt.Errorf("client acting as %s: %w", user, err)
	}
	a := Actor{User: user, Writer: c, Reader: c, Exec: pods, Logs: pods}
	i.byUser[user] = a
	return a, nil
}

// actor returns the identity the run's actions act as, once per run: the
// service account the target instance's environment names, or for a
// deletion (a tombstone names no policy) the user the release was last
// applied as (the StyrminDeployment's status.appliedAs).
func (r *Reconciler) actor(ctx context.Context, run *taskRun) (Actor, error) {
	if run.actor != nil {
		return *run.actor, nil
	}
	user := ""
	if in := run.instance; in != nil && !in.Tombstone() && in.Context != nil {
		if ns, name, ok := in.Context.Environment.Policy.ServiceAccount(run.task.Spec.Namespace); ok {
			user = drivers.ServiceAccountUser(ns, name)
		}
	} else {
		sd, err := r.deployment(ctx, run)
		if err != nil {
			return Actor{}, err
		}
		if sd != nil {
			user = sd.Status.AppliedAs
		}
	}
	a := r.own
	if user != "" {
		if r.opts.Impersonate == nil {
			return Actor{}, fmt.Errorf("the task's actions must act as %s, and the agent has no impersonation configured", user)
		}
		var err error
		if a, err = r.opts.Impersonate.As(user); err != nil {
			return Actor{}, err
		}
	}
	run.actor = &a
	return a, nil
}

// forbidden says which identity the cluster's RBAC refused an action, or
// that an admission policy (a webhook's 403) or a ResourceQuota did, for
// the API server answers them alike; the error stays retryable until the
// step's timeout (the RBAC or the policy may be fixed meanwhile) and keeps
// the API server's reason for errors.As.
func forbidden(a Actor, what string, err error) error {
	switch {
	case outcome.AdmissionDenied(err):
		return fmt.Errorf("%s as %s: an admission policy of the cluster refuses it (reason %s): %w", what, a.describe(), v1alpha1.ReasonAdmissionDenied, err)
	case strings.Contains(err.Error(), "exceeded quota"):
		return fmt.Errorf("%s as %s: a ResourceQuota refuses it (reason %s): %w", what, a.describe(), v1alpha1.ReasonQuotaExceeded, err)
	}
	return fmt.Errorf("%s as %s, which the cluster's RBAC does not allow (reason %s): %w", what, a.describe(), v1alpha1.ReasonForbidden, err)
}
