package instance

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// writeAttempts bounds the optimistic-concurrency retries of
// WriteInstance.
const writeAttempts = 5

// WriteOutcome says what WriteInstance did.
type WriteOutcome struct {
	// Written is true when the StyrminDeployment now holds the instance:
	// created, updated, or already holding it (a resumed task writes
	// again). For a tombstone with no StyrminDeployment it is true too.
	Written bool
	// Kept is the sequence of the newer instance found and left unchanged
	// (Written is false): the task ends Superseded.
	Kept int64
	// Deployment is the StyrminDeployment after the write (nil for a
	// tombstone that found none).
	Deployment *v1alpha1.StyrminDeployment
}

// WriteInstance makes the StyrminDeployment of in's namespace hold in:
// the "write the StyrminDeployment" core step of a task. It creates the
// namespace when missing (not for a tombstone).
//
// The guard: a StyrminDeployment whose styrmin.io/instance-sequence
// annotation holds a higher number than in.Sequence is left unchanged and
// the outcome says so (Kept). The read and the write are one optimistic
// transaction (resourceVersion), so two tasks never both win. An
// annotation that is not a number is an error naming it; removing it lets
// the next write through (the recovery from a hand-edited annotation).
//
// namespace is the deployment's namespace; "" takes it from in's context
// (a tombstone has none: pass it).
func WriteInstance(ctx context.Context, c client.Client, namespace string, in *resolver.Instance) (WriteOutcome, error) {
	if namespace == "" && in.Context != nil {
		namespace = in.Context.Deployment.Namespace
	}
	if namespace == "" {
		return WriteOutcome{}, fmt.Errorf("write %s sequence %d: no namespace (a tombstone needs it passed)", in.ID, in.Sequence)
	}
	spec, err := SpecFromInstance(in)
	if err != nil {
		return WriteOutcome{}, err
	}
	if !in.Tombstone() {
		if err := EnsureNamespace(ctx, c, namespace, spec.Deployment); err != nil {
			return WriteOutcome{}, err
		}
	}
	key := Key(namespace)
	for attempt := 0; attempt < writeAttempts; attempt++ {
		var sd v1alpha1.StyrminDeployment
		err := c.Get(ctx, key, &sd)
		switch {
		case apierrors.IsNotFound(err):
			if in.Tombstone() {
				return WriteOutcome{Written: true}, nil
			}
			// With the controller's finalizer from the start: saves the
			// controller a request per deployment.
			sd = v1alpha1.StyrminDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: namespace,
				Finalizers: []string{v1alpha1.FinalizerRelease}}}
			stamp(&sd, spec)
			err = c.Create(ctx, &sd)
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return WriteOutcome{}, fmt.Errorf("write %s sequence %d: create StyrminDeployment %s: %w", in.ID, in.Sequence, key, err)
			}
			return WriteOutcome{Written: true, Deployment: clearManagedFields(ctx, c, &sd)}, nil
		case err != nil:
			return WriteOutcome{}, fmt.Errorf("write %s sequence %d: read StyrminDeployment %s: %w", in.ID, in.Sequence, key, err)
		}
		if sd.Spec.Deployment != spec.Deployment {
			// Namespaces are unique per cluster (the resolver refuses two
			// deployments in one); a StyrminDeployment of another
			// deployment here is never overwritten.
			return WriteOutcome{}, fmt.Errorf("write %s sequence %d: %w: StyrminDeployment %s holds deployment %s", in.ID, in.Sequence, ErrOtherDeployment, key, sd.Spec.Deployment)
		}
		held, ok, err := HeldSequence(&sd)
		if err != nil {
			return WriteOutcome{}, fmt.Errorf("write %s sequence %d: %w", in.ID, in.Sequence, err)
		}
		if ok && held > in.Sequence {
			return WriteOutcome{Kept: held, Deployment: &sd}, nil
		}
		if ok && held == in.Sequence && sd.Spec.Digest == spec.Digest {
			return WriteOutcome{Written: true, Deployment: &sd}, nil
		}
		stamp(&sd, spec)
		err = c.Update(ctx, &sd)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return WriteOutcome{}, fmt.Errorf("write %s sequence %d: update StyrminDeployment %s: %w", in.ID, in.Sequence, key, err)
		}
		return WriteOutcome{Written: true, Deployment: &sd}, nil
	}
	return WriteOutcome{}, fmt.Errorf("write %s sequence %d: StyrminDeployment %s kept changing (%d conflicts)", in.ID, in.Sequence, key, writeAttempts)
}

// clearManagedFields clears the managed fields a create left on sd (see
// stamp) and returns sd as written; it costs a request, which the status
// writes of the rollout that follows repay (docs/agent-performance.md). A
// merge patch without a resourceVersion: a status write that came first
// does not make it fail. A failure is no error: the fields stay until the
// next change clears them.
func clearManagedFields(ctx context.Context, c client.Client, sd *v1alpha1.StyrminDeployment) *v1alpha1.StyrminDeployment {
	if len(sd.ManagedFields) == 0 {
		return sd
	}
	cleared := sd.DeepCopy()
	if err := c.Patch(ctx, cleared, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"managedFields":[{}]}}`))); err != nil {
		return sd
	}
	return cleared
}

// stamp puts spec, the sequence annotation and the identity labels on sd,
// and clears its managed fields.
//
// The agent is the only writer of a StyrminDeployment's spec and status,
// so field ownership says nothing anyone uses, while tracking it cost the
// API server about 40% of each write of one (a typed merge of the whole
// object, and managed fields a third of its size). An update whose
// managedFields is a list of one empty entry clears them, and the API
// server tracks none for later updates, patches and status writes of an
// object that has none (docs/agent-performance.md). A create always
// tracks them: clearManagedFields follows it.
func stamp(sd *v1alpha1.StyrminDeployment, spec v1alpha1.StyrminDeploymentSpec) {
	sd.ManagedFields = []metav1.ManagedFieldsEntry{{}}
	sd.Spec = spec
	if sd.Annotations == nil {
		sd.Annotations = map[string]string{}
	}
	sd.Annotations[v1alpha1.AnnotationInstanceSequence] = strconv.FormatInt(spec.Sequence, 10)
	if sd.Labels == nil {
		sd.Labels = map[string]string{}
	}
	for k, v := range spec.Deployment.Labels() {
		sd.Labels[k] = v
	}
}

// HeldSequence returns the sequence in sd's styrmin.io/instance-sequence
// annotation; ok is false when there is none.
func HeldSequence(sd *v1alpha1.StyrminDeployment) (seq int64, ok bool, err error) {
	s, ok := sd.Annotations[v1alpha1.AnnotationInstanceSequence]
	if !ok {
		return 0, false, nil
	}
	seq, err = strconv.ParseInt(s, 10, 64)
	if err != nil || seq < 0 {
		return 0, false, fmt.Errorf("StyrminDeployment %s/%s: annotation %s is %q, not a sequence number: remove it and lock a change to write the whole configuration again",
			sd.Namespace, sd.Name, v1alpha1.AnnotationInstanceSequence, s)
	}
	return seq, true, nil
}

// EnsureNamespace creates a deployment's namespace, labelled with its
// identity, when it does not exist. A namespace being deleted is an error
// (retryable: it will be gone).
func EnsureNamespace(ctx context.Context, c client.Client, name string, id v1alpha1.DeploymentID) error {
	var ns corev1.Namespace
	err := c.Get(ctx, client.ObjectKey{Name: name}, &ns)
	if err == nil {
		if !ns.DeletionTimestamp.IsZero() {
			return fmt.Errorf("namespace %s is being deleted; retry when it is gone", name)
		}
		return nil
	}
	if !apierrors.IsNotFound(err) {
		return fmt.Errorf("read namespace %s: %w", name, err)
	}
	return CreateNamespace(ctx, c, name, id)
}

// CreateNamespace creates a deployment's namespace, labelled with its
// identity; one that exists is not an error.
func CreateNamespace(ctx context.Context, c client.Client, name string, id v1alpha1.DeploymentID) error {
	labels := id.Labels()
	labels["app.kubernetes.io/managed-by"] = v1alpha1.FieldManager
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create namespace %s: %w", name, err)
	}
	return nil
}

// Key is the key of the StyrminDeployment of a deployment's namespace: it
// is named after the namespace.
func Key(namespace string) client.ObjectKey {
	return client.ObjectKey{Namespace: namespace, Name: namespace}
}

// DeploymentID is the API's form of a deployment's identity.
func DeploymentID(id resolver.ID) v1alpha1.DeploymentID {
	return v1alpha1.DeploymentID{Cluster: id.Cluster, Environment: id.Environment, Name: id.Name}
}

// ResolverID is the resolver's form of a deployment's identity.
func ResolverID(id v1alpha1.DeploymentID) resolver.ID {
	return resolver.ID{Cluster: id.Cluster, Environment: id.Environment, Name: id.Name}
}

// ErrOtherDeployment is returned (wrapped) by WriteInstance when the
// namespace's StyrminDeployment holds another deployment.
var ErrOtherDeployment = errors.New("the namespace belongs to another deployment")

// ErrStalled is returned (wrapped) by Applied when the controller cannot
// apply the instance without a change in git.
var ErrStalled = errors.New("stalled")

// Applied reports whether sd runs sequence seq (or a later one) and all
// its components are ready: the controller observed the current spec,
// its applied sequence is at least seq and Ready is True. When the
// controller is stalled on the current spec it returns an error wrapping
// ErrStalled with the condition's reason and message, so a task can fail
// with it instead of waiting for its timeout.
func Applied(sd *v1alpha1.StyrminDeployment, seq int64) (bool, error) {
	if sd.Status.ObservedGeneration != sd.Generation {
		return false, nil
	}
	if c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionStalled); c != nil &&
		c.Status == metav1.ConditionTrue && c.ObservedGeneration == sd.Generation {
		return false, fmt.Errorf("StyrminDeployment %s/%s: %w: %s: %s", sd.Namespace, sd.Name, ErrStalled, c.Reason, c.Message)
	}
	if sd.Status.AppliedSequence < seq {
		return false, nil
	}
	if c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady); c != nil &&
		c.Status == metav1.ConditionFalse && c.Reason == v1alpha1.ReasonWorkloadFailed && c.ObservedGeneration == sd.Generation {
		// A workload that cannot become ready (a rollout past its
		// progress deadline): waiting longer does not help.
		return false, fmt.Errorf("StyrminDeployment %s/%s: %w: %s: %s", sd.Namespace, sd.Name, ErrStalled, c.Reason, c.Message)
	}
	return apimeta.IsStatusConditionTrue(sd.Status.Conditions, v1alpha1.ConditionReady), nil
}
