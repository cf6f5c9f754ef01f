package operation

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// target is one deployment an operation acts on: its StyrminDeployment,
// the instance that runs and its driver.
type target struct {
	sd       *v1alpha1.StyrminDeployment
	instance *resolver.Instance
	driver   *drivers.Driver
}

// RefusedError is an operation refused before anything ran: it names the
// environment, the deployment where one is at fault, and what was
// expected. Nothing was changed.
type RefusedError struct {
	Environment string
	Deployment  string
	Msg         string
}

func (e *RefusedError) Error() string {
	if e.Deployment != "" {
		return fmt.Sprintf("environment %s, deployment %s: %s", e.Environment, e.Deployment, e.Msg)
	}
	if e.Environment == "" {
		// Refused before the environment is known (a bad name).
		return e.Msg
	}
	return fmt.Sprintf("environment %s: %s", e.Environment, e.Msg)
}

// DriverError is an operation's target whose running driver could not be
// loaded: git may hold it again (a fetch that fails, a commit gone from
// the remote), unlike a RefusedError.
type DriverError struct {
	// Deployment is the deployment's name.
	Deployment string
	// Err says which driver and why, naming the environment.
	Err error
}

func (e *DriverError) Error() string { return e.Err.Error() }

func (e *DriverError) Unwrap() error { return e.Err }

// targets finds the deployments of cluster/env an operation acts on
// (names: all but the internal ones when empty), with what runs. A name
// that is no deployment, or a deployment with nothing running, is
// refused. With names empty, a deployment being deleted (its
// StyrminDeployment holds a tombstone) is left out and named in skipped
// with why: a tombstone stays while an uninstall runs or retries, and the
// environment's other deployments are backed up all the same; it is
// refused only when no deployment is left.
func targets(ctx context.Context, c client.Reader, src driversource.Source, cluster, env string, names []string) (out []target, skipped []string, err error) {
	var list v1alpha1.StyrminDeploymentList
	if err := c.List(ctx, &list, client.MatchingLabels{v1alpha1.LabelCluster: cluster, v1alpha1.LabelEnvironment: env}); err != nil {
		return nil, nil, fmt.Errorf("listing the StyrminDeployments of %s/%s: %w", cluster, env, err)
	}
	byName := map[string]*v1alpha1.StyrminDeployment{}
	for i := range list.Items {
		sd := &list.Items[i]
		if sd.Spec.Internal != "" || !sd.DeletionTimestamp.IsZero() {
			continue
		}
		byName[sd.Spec.Deployment.Name] = sd
	}
	envName := cluster + "/" + env
	if len(names) == 0 {
		var deleting []string
		for n, sd := range byName {
			if sd.Spec.Tombstone() {
				deleting = append(deleting, n)
				continue
			}
			names = append(names, n)
		}
		slices.Sort(deleting)
		for _, n := range deleting {
			skipped = append(skipped, n+": the deployment is being deleted: it has no running instance")
		}
		if len(names) == 0 {
			msg := "no deployment of the environment runs in this cluster: there is nothing to back up or restore"
			if len(deleting) > 0 {
				msg += " (being deleted: " + strings.Join(deleting, ", ") + ")"
			}
			return nil, nil, &RefusedError{Environment: envName, Msg: msg}
		}
	}
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	for _, n := range names {
		sd := byName[n]
		if sd == nil {
			return nil, nil, &RefusedError{Environment: envName, Deployment: n, Msg: fmt.Sprintf("no such deployment runs in this cluster (expected one of: %s)", strings.Join(sortedKeys(byName), ", "))}
		}
		if sd.Spec.Tombstone() {
			return nil, nil, &RefusedError{Environment: envName, Deployment: n, Msg: "the deployment is being deleted: it has no running instance"}
		}
		in, err := instance.InstanceFromSpec(&sd.Spec)
		if err != nil {
			return nil, nil, &RefusedError{Environment: envName, Deployment: n, Msg: fmt.Sprintf("its StyrminDeployment holds no valid instance: %v", err)}
		}
		d, err := driversource.Get(ctx, src, driversource.Request{Ref: in.Driver, Commit: in.SourceCommit})
		if err != nil {
			return nil, nil, &DriverError{Deployment: n, Err: fmt.Errorf("environment %s, deployment %s: driver %s@%s: %w", envName, n, in.Driver.Name, in.Driver.Version, err)}
		}
		out = append(out, target{sd: sd, instance: in, driver: d})
	}
	return out, skipped, nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// orderAfter is where a new operation task of a deployment goes: after
// the newest change the agent made a task for (its sequence and lock), or
// after the running instance when none is left.
func orderAfter(ctx context.Context, c client.Reader, sd *v1alpha1.StyrminDeployment) (int64, v1alpha1.LockRef, error) {
	var tasks v1alpha1.StyrminTaskList
	if err := c.List(ctx, &tasks, client.InNamespace(sd.Namespace), client.MatchingLabels(sd.Spec.Deployment.Labels())); err != nil {
		return 0, v1alpha1.LockRef{}, fmt.Errorf("listing the tasks of %s: %w", instance.ResolverID(sd.Spec.Deployment), err)
	}
	seq := sd.Spec.Sequence
	id := sd.Spec.Deployment
	lock := v1alpha1.LockRef{Commit: sd.Spec.SourceCommit, Path: instance.ResolverID(id).LockPath()}
	for _, t := range tasks.Items {
		if t.Spec.Operation == nil && t.Spec.ToSequence >= seq {
			seq, lock = t.Spec.ToSequence, t.Spec.Lock
		}
	}
	if lock.Commit == "" {
		lock.Commit = "unknown"
	}
	return seq, lock, nil
}

// driverAt is the driver of a deployment's instance at sequence seq, as
// its StyrminDeployment (the instance locked or the one active) or its
// change task for seq records it; false when none does any more.
func driverAt(ctx context.Context, c client.Reader, namespace, name string, seq int64) (v1alpha1.DriverRef, bool) {
	var sds v1alpha1.StyrminDeploymentList
	if err := c.List(ctx, &sds, client.InNamespace(namespace)); err == nil {
		for _, sd := range sds.Items {
			if sd.Spec.Deployment.Name != name {
				continue
			}
			if sd.Spec.Sequence == seq {
				return sd.Spec.Driver, true
			}
			if a := sd.Status.Active; a != nil && a.Sequence == seq {
				return a.Driver, true
			}
		}
	}
	var t v1alpha1.StyrminTask
	if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: v1alpha1.TaskName(name, seq)}, &t); err == nil {
		if a := instance.TaskTarget(&t); a != nil {
			return a.Driver, true
		}
	}
	return v1alpha1.DriverRef{}, false
}
