package install

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/health"
	"github.com/styrmin/styrmin/operator/operation"
)

// UninstallOptions tune Uninstall.
type UninstallOptions struct {
	// Namespace is the agent's namespace (default DefaultNamespace).
	Namespace string
	// KeepCRDs leaves the CRDs (the Styrmin objects are deleted all the
	// same).
	KeepCRDs bool
	// KeepNamespace leaves the agent's Namespace and what install did not
	// create in it (the credentials Secrets); install's objects there are
	// deleted.
	KeepNamespace bool
	// Force goes on while StyrminTasks have not ended, printing for each
	// the replicas its stopComponents steps recorded: deleting a task
	// loses them, and the workloads it stopped stay at 0.
	Force bool
	// Timeout bounds each wait: for the agent's pods to end, for the
	// Styrmin objects and the CRDs to go (default 2 minutes).
	Timeout time.Duration
}

// agentSelector selects the agent's pods of every installation (the
// kustomize base's, the chart's and install's label).
const agentSelector = "app.kubernetes.io/name=" + agentDeployment

// styrminKind is a kind of Styrmin object and the finalizer the agent puts
// on it, if any.
type styrminKind struct {
	kind, finalizer string
}

// styrminKinds are the kinds Uninstall deletes, in that order.
var styrminKinds = []styrminKind{
	{"StyrminDeployment", v1alpha1.FinalizerRelease},
	{"StyrminBackup", operation.Finalizer},
	{"StyrminRestore", operation.Finalizer},
	{"StyrminTask", ""},
	{"StyrminSource", ""},
}

// defaultUninstallTimeout is UninstallOptions.Timeout when it is 0.
const defaultUninstallTimeout = 2 * time.Minute

// Uninstall removes Styrmin from the cluster of cfg and leaves the
// applications running as plain Helm releases, writing one line to w for
// each thing it does:
//
//  0. it refuses, changing nothing, while a StyrminTask has not ended
//     (its phase is not terminal), unless o.Force: the replicas a task's
//     stopComponents steps scaled down from live only in its status, and
//     deleting it would leave those workloads at 0;
//  1. it scales the agent's Deployment to 0 and waits until its pods are
//     gone, then refuses to go on while any agent pod (label
//     app.kubernetes.io/name=styrmin-agent) runs anywhere: an agent that
//     saw its objects deleted would uninstall every application. It
//     looks at the tasks again once the agent is stopped: a task started
//     meanwhile scales the agent back and refuses, unless o.Force, which
//     prints each such task's recorded replicas;
//  2. it removes the agent's finalizers (styrmin.io/release,
//     styrmin.io/operation-tasks) from every StyrminDeployment,
//     StyrminBackup and StyrminRestore, so that no namespace waits for an
//     agent that is gone, and deletes every Styrmin object; the
//     applications' objects and their Helm release Secrets stay; then
//     the Jobs the agent made for its tasks' steps that ended (one that
//     runs is left to end, named);
//  3. unless o.KeepCRDs it deletes the CRDs;
//  4. it deletes what install created: the admission policy and its
//     binding, RBAC, the agent's Service and Deployment and, unless
//     o.KeepNamespace, its Namespace (with the Secrets made in it).
//
// What is already gone is skipped, so it may run again after a failure or
// a success.
func Uninstall(ctx context.Context, cfg *rest.Config, w io.Writer, o UninstallOptions) error {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	// A negative timeout would end every wait at once: refused here,
	// before the agent is scaled to 0, not after it, when waiting for
	// its pods fails.
	if o.Timeout < 0 {
		return fmt.Errorf("--timeout %s: expected a positive duration (or 0 for the default, %s)", o.Timeout, defaultUninstallTimeout)
	}
	if o.Timeout == 0 {
		o.Timeout = defaultUninstallTimeout
	}
	c, err := newClient(cfg)
	if err != nil {
		return err
	}
	u := &uninstaller{c: c, w: w, o: o}
	// The tasks first, so that a refusal changes nothing; again once the
	// agent is stopped, as it may start one until then.
	running, err := u.unfinishedTasks(ctx)
	if err != nil {
		return err
	}
	if len(running) > 0 && !o.Force {
		return unfinishedError(running, "nothing was changed")
	}
	replicas, err := u.stopAgents(ctx)
	if err != nil {
		return err
	}
	if running, err = u.unfinishedTasks(ctx); err != nil {
		return err
	}
	if len(running) > 0 {
		if !o.Force {
			what := "nothing else was changed"
			if replicas != nil {
				if err := u.scaleAgent(ctx, *replicas); err != nil {
					return fmt.Errorf("%w; and scaling the agent back to %d replicas: %v", unfinishedError(running, "nothing else was changed"), *replicas, err)
				}
				what = fmt.Sprintf("the agent was scaled back to %d replicas; nothing else was changed", *replicas)
			}
			return unfinishedError(running, what)
		}
		for _, t := range running {
			u.sayTask(t)
		}
		u.forced = true
	}
	// The agent's bindings go before anything it acts on: an agent that
	// comes back meanwhile (a GitOps tool or an autoscaler scaling it up
	// again) could otherwise see the StyrminDeployments go, finalizers and
	// all, and uninstall every application. Without them it can read and
	// change nothing.
	if err := u.deleteInstalledOf(ctx, isBinding); err != nil {
		return err
	}
	released, err := u.deleteObjects(ctx)
	if err != nil {
		return err
	}
	if err := u.deleteStepJobs(ctx); err != nil {
		return err
	}
	if !o.KeepCRDs {
		if err := u.deleteCRDs(ctx); err != nil {
			return err
		}
	}
	if err := u.deleteInstalled(ctx); err != nil {
		return err
	}
	if u.done == 0 {
		fmt.Fprintf(w, "nothing to remove: no Styrmin agent, object or CRD found (namespace %s)\n", o.Namespace)
		return nil
	}
	what := "Styrmin removed"
	if o.KeepCRDs {
		what += " (its CRDs kept: --keep-crds)"
	}
	fmt.Fprintf(w, "%s. The applications keep running as plain Helm releases: their objects and release Secrets (type helm.sh/release.v1) stay in their namespaces (helm list -A); nothing manages or corrects them any more", what)
	if len(released) > 0 {
		fmt.Fprintf(w, ": %s", strings.Join(released, ", "))
	}
	if u.forced {
		fmt.Fprintf(w, "; but the workloads the unfinished tasks above stopped stay as they are: scale them back by hand")
	}
	fmt.Fprintln(w)
	return nil
}

type uninstaller struct {
	c client.Client
	w io.Writer
	o UninstallOptions
	// done counts what was changed.
	done int
	// forced: tasks not ended were deleted (--force).
	forced bool
}

func (u *uninstaller) say(format string, args ...any) {
	u.done++
	fmt.Fprintf(u.w, format+"\n", args...)
}

// unfinishedTasks are the StyrminTasks whose phase is not terminal (none
// when their CRD is gone).
func (u *uninstaller) unfinishedTasks(ctx context.Context) ([]v1alpha1.StyrminTask, error) {
	var list v1alpha1.StyrminTaskList
	err := u.c.List(ctx, &list)
	switch {
	case apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing StyrminTasks: %w; nothing else was changed", err)
	}
	var out []v1alpha1.StyrminTask
	for _, t := range list.Items {
		if !t.Status.Phase.Terminal() {
			out = append(out, t)
		}
	}
	return out, nil
}

// taskName names a task, its deployment and its phase.
func taskName(t v1alpha1.StyrminTask) string {
	phase := string(t.Status.Phase)
	if phase == "" {
		phase = "not started"
	}
	return fmt.Sprintf("StyrminTask %s/%s (deployment %s in namespace %s, %s)", t.Namespace, t.Name, t.Spec.Deployment.String(), t.Spec.Namespace, phase)
}

func unfinishedError(tasks []v1alpha1.StyrminTask, what string) error {
	names := make([]string, len(tasks))
	for i, t := range tasks {
		names[i] = taskName(t)
	}
	return fmt.Errorf("refusing to uninstall while tasks have not ended: %s. Deleting a task loses the replicas its stopComponents steps scaled the application down from, which would stay at 0; %s. "+
		"Wait for them to end (kubectl get styrmintasks -A) and run uninstall again, or pass --force and scale back what it prints", strings.Join(names, "; "), what)
}

// sayTask says what a task not ended leaves behind: the workloads its
// stopComponents steps recorded, with their replicas.
func (u *uninstaller) sayTask(t v1alpha1.StyrminTask) {
	var recorded []string
	for _, st := range t.Status.Steps {
		if st.Action != "stopComponents" {
			continue
		}
		keys := make([]string, 0, len(st.Recorded))
		for k := range st.Recorded {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			recorded = append(recorded, fmt.Sprintf("%s: %s replicas (components %s)", k, st.Recorded[k], strings.Join(st.Components, ", ")))
		}
	}
	if len(recorded) == 0 {
		u.say("--force: %s not ended; its steps recorded no stopped workload", taskName(t))
		return
	}
	u.say("--force: %s not ended; its stopComponents steps stopped, in namespace %s, %s: scale them back by hand (kubectl -n %s scale KIND/NAME --replicas=N) if they are still at 0",
		taskName(t), t.Spec.Namespace, strings.Join(recorded, "; "), t.Spec.Namespace)
}

// scaleAgent sets the agent's Deployment's replicas.
func (u *uninstaller) scaleAgent(ctx context.Context, replicas int32) error {
	dep, err := readAgent(ctx, u.c, u.o.Namespace)
	if err != nil {
		return err
	}
	patch := client.RawPatch(types.MergePatchType, []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)))
	if err := u.c.Patch(ctx, dep, patch); err != nil {
		return err
	}
	u.say("Deployment %s/%s scaled back to %d replicas", u.o.Namespace, agentDeployment, replicas)
	return nil
}

// stopAgents scales the agent to 0, waits for its pods to go, and fails
// when an agent pod still runs anywhere. It returns the replicas it
// scaled the agent down from (nil when it did not scale it).
func (u *uninstaller) stopAgents(ctx context.Context) (*int32, error) {
	ns := u.o.Namespace
	var was *int32
	dep, err := readAgent(ctx, u.c, ns)
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		return nil, err
	default:
		if dep.Spec.Replicas == nil || *dep.Spec.Replicas != 0 {
			n := int32(1)
			if dep.Spec.Replicas != nil {
				n = *dep.Spec.Replicas
			}
			patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":0}}`))
			if err := u.c.Patch(ctx, dep, patch); err != nil {
				return nil, fmt.Errorf("scaling the agent's Deployment %s/%s to 0: %w; nothing was removed", ns, dep.Name, err)
			}
			was = &n
			u.say("Deployment %s/%s scaled to 0 replicas", ns, dep.Name)
		}
		sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
		if err != nil {
			return was, fmt.Errorf("the agent's Deployment %s/%s: selector: %w", ns, dep.Name, err)
		}
		var left []string
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, u.o.Timeout, true, func(ctx context.Context) (bool, error) {
			var pods corev1.PodList
			if err := u.c.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: sel}); err != nil {
				return false, err
			}
			left = left[:0]
			for _, p := range pods.Items {
				// An evicted or failed pod stays after the scale to 0:
				// it runs nothing.
				if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
					left = append(left, p.Name)
				}
			}
			return len(left) == 0, nil
		})
		if err != nil {
			return was, fmt.Errorf("waiting for the agent's pods in %s to end: %w (still there: %s); the agent stays scaled to 0 and nothing else was removed: see kubectl -n %s get pods -l %s, then run uninstall again (or styrminctl install to bring the agent back)",
				ns, err, strings.Join(left, ", "), ns, agentSelector)
		}
	}
	sel, _ := labels.Parse(agentSelector)
	var pods corev1.PodList
	if err := u.c.List(ctx, &pods, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return was, fmt.Errorf("looking for running agents (pods %s): %w; nothing else was removed", agentSelector, err)
	}
	var running []string
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			running = append(running, p.Namespace+"/"+p.Name)
		}
	}
	if len(running) > 0 {
		return was, fmt.Errorf("an agent still runs (pods %s; another installation, or -n is not the agent's namespace): it would uninstall every application when its objects go. "+
			"Stop it (kubectl -n NAMESPACE scale deployment/%s --replicas=0) and run uninstall again; no Styrmin object was removed", strings.Join(running, ", "), agentDeployment)
	}
	return was, nil
}

// deleteObjects removes the agent's finalizers from every Styrmin object
// and deletes them all, and returns the StyrminDeployments left running.
func (u *uninstaller) deleteObjects(ctx context.Context) ([]string, error) {
	var released []string
	for _, k := range styrminKinds {
		gvk := v1alpha1.GroupVersion.WithKind(k.kind)
		list, err := u.list(ctx, gvk)
		if err != nil {
			return released, err
		}
		if list == nil {
			continue // the CRD is gone: so are its objects
		}
		deleted := 0
		var namespaces []string
		for i := range list.Items {
			obj := &list.Items[i]
			name := obj.Namespace + "/" + obj.Name
			stripped, err := u.stripFinalizer(ctx, gvk, obj, k.finalizer)
			if err != nil {
				return released, err
			}
			if stripped {
				what := "its tasks go below"
				if k.kind == "StyrminDeployment" {
					what = "its application is not uninstalled"
				}
				u.say("%s %s: finalizer %s removed (%s)", k.kind, name, k.finalizer, what)
			}
			if k.kind == "StyrminDeployment" {
				released = append(released, name)
			}
			if obj.DeletionTimestamp.IsZero() {
				deleted++
			}
			if !slices.Contains(namespaces, obj.Namespace) {
				namespaces = append(namespaces, obj.Namespace)
			}
		}
		// One request a namespace: a cluster holds thousands of tasks.
		for _, ns := range namespaces {
			all := &metav1.PartialObjectMetadata{}
			all.SetGroupVersionKind(gvk)
			if err := u.c.DeleteAllOf(ctx, all, client.InNamespace(ns)); err != nil && !apierrors.IsNotFound(err) {
				return released, fmt.Errorf("deleting the %ss in namespace %s: %w", k.kind, ns, err)
			}
		}
		if deleted > 0 {
			u.say("%d %s(s) deleted", deleted, k.kind)
		}
		var left []string
		err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, u.o.Timeout, true, func(ctx context.Context) (bool, error) {
			list, err := u.list(ctx, gvk)
			if err != nil || list == nil {
				return list == nil, err
			}
			left = left[:0]
			for i := range list.Items {
				obj := &list.Items[i]
				// Put back by something still running? Removed again.
				if _, err := u.stripFinalizer(ctx, gvk, obj, k.finalizer); err != nil {
					return false, err
				}
				left = append(left, fmt.Sprintf("%s/%s (finalizers %s)", obj.Namespace, obj.Name, strings.Join(obj.Finalizers, ", ")))
			}
			return len(left) == 0, nil
		})
		if err != nil {
			return released, fmt.Errorf("waiting for the %ss to go: %w; still there: %s. Other finalizers than Styrmin's hold them: once what set them is done, remove them (kubectl -n NAMESPACE patch %s NAME --type=merge -p '{\"metadata\":{\"finalizers\":null}}') and run uninstall again",
				k.kind, err, strings.Join(left, "; "), strings.ToLower(k.kind))
		}
	}
	return released, nil
}

// deleteStepJobs deletes the Jobs the agent made for its tasks' steps
// (labels styrmin.io/task and styrmin.io/deployment) that ended, their
// pods with them: the agent pruned them as its tasks went, and with the
// tasks deleted and no agent, every migration's Job and pod stayed in the
// applications' namespaces for good. One that has not ended is left to
// end, named (a migration stopped midway leaves its data half done); a
// chart's own Jobs carry no such label and stay with the application.
func (u *uninstaller) deleteStepJobs(ctx context.Context) error {
	var jobs batchv1.JobList
	if err := u.c.List(ctx, &jobs, client.HasLabels{v1alpha1.LabelTask, v1alpha1.LabelDeployment}); err != nil {
		return fmt.Errorf("listing the Jobs the agent made for its tasks' steps: %w", err)
	}
	deleted := map[string]int{}
	background := metav1.DeletePropagationBackground
	for i := range jobs.Items {
		j := &jobs.Items[i]
		if !j.DeletionTimestamp.IsZero() {
			continue
		}
		if !health.JobEnded(j) {
			// Not counted as done: a second run finds it again.
			fmt.Fprintf(u.w, "Job %s/%s of task %s has not ended: left to end; delete it once it has (kubectl -n %s delete job %s)\n",
				j.Namespace, j.Name, j.Labels[v1alpha1.LabelTask], j.Namespace, j.Name)
			continue
		}
		uid := j.UID
		err := u.c.Delete(ctx, j, client.Preconditions{UID: &uid}, client.PropagationPolicy(background))
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return fmt.Errorf("deleting Job %s/%s of task %s, which ended: %w", j.Namespace, j.Name, j.Labels[v1alpha1.LabelTask], err)
		}
		deleted[j.Namespace]++
	}
	for _, ns := range slices.Sorted(maps.Keys(deleted)) {
		u.say("%d ended Job(s) of the agent's task steps deleted in namespace %s, with their pods", deleted[ns], ns)
	}
	return nil
}

// list lists every object of gvk's kind, metadata only; nil when the
// kind is not served (its CRD is gone).
func (u *uninstaller) list(ctx context.Context, gvk schema.GroupVersionKind) (*metav1.PartialObjectMetadataList, error) {
	list := &metav1.PartialObjectMetadataList{}
	list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	err := u.c.List(ctx, list)
	switch {
	case apimeta.IsNoMatchError(err) || apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("listing %ss: %w", gvk.Kind, err)
	}
	return list, nil
}

// stripFinalizer removes finalizer from obj (read again on a conflict),
// and tells whether it was there.
func (u *uninstaller) stripFinalizer(ctx context.Context, gvk schema.GroupVersionKind, obj *metav1.PartialObjectMetadata, finalizer string) (bool, error) {
	if finalizer == "" || !slices.Contains(obj.Finalizers, finalizer) {
		return false, nil
	}
	stripped := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := &metav1.PartialObjectMetadata{}
		cur.SetGroupVersionKind(gvk)
		if err := u.c.Get(ctx, client.ObjectKeyFromObject(obj), cur); err != nil {
			return err
		}
		if !slices.Contains(cur.Finalizers, finalizer) {
			return nil
		}
		before := cur.DeepCopy()
		cur.Finalizers = slices.DeleteFunc(cur.Finalizers, func(f string) bool { return f == finalizer })
		if err := u.c.Patch(ctx, cur, client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		stripped = true
		return nil
	})
	if apierrors.IsNotFound(err) {
		return stripped, nil
	}
	if err != nil {
		return false, fmt.Errorf("removing finalizer %s from %s %s/%s: %w", finalizer, gvk.Kind, obj.Namespace, obj.Name, err)
	}
	return stripped, nil
}

// deleteCRDs deletes the styrmin.io CRDs and waits until they are gone.
func (u *uninstaller) deleteCRDs(ctx context.Context) error {
	names, err := crdNames()
	if err != nil {
		return err
	}
	var deleted []string
	for _, name := range names {
		crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: name}}
		err := u.c.Delete(ctx, crd)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			return fmt.Errorf("deleting CRD %s: %w", name, err)
		}
		deleted = append(deleted, name)
		u.say("CustomResourceDefinition %s deleted", name)
	}
	var left []string
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, u.o.Timeout, true, func(ctx context.Context) (bool, error) {
		left = left[:0]
		for _, name := range deleted {
			err := u.c.Get(ctx, client.ObjectKey{Name: name}, &apiextensionsv1.CustomResourceDefinition{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil:
				return false, err
			default:
				left = append(left, name)
			}
		}
		return len(left) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("waiting for the CRDs to go: %w; still there: %s (see kubectl describe crd NAME: objects with other finalizers hold it)", err, strings.Join(left, ", "))
	}
	return nil
}

// deleteInstalled deletes the objects install creates, but the CRDs, in
// the reverse order of Render: the agent first, its Namespace last.
func (u *uninstaller) deleteInstalled(ctx context.Context) error {
	return u.deleteInstalledOf(ctx, func(o *unstructured.Unstructured) bool { return !isCRD(o) })
}

// isBinding reports whether o binds a role (ClusterRoleBinding,
// RoleBinding).
func isBinding(o *unstructured.Unstructured) bool {
	return o.GroupVersionKind().Group == "rbac.authorization.k8s.io" && strings.HasSuffix(o.GetKind(), "RoleBinding")
}

// deleteInstalledOf deletes what install created that only keeps, in
// the reverse order of install.
func (u *uninstaller) deleteInstalledOf(ctx context.Context, only func(*unstructured.Unstructured) bool) error {
	objs, err := manifests(u.o.Namespace)
	if err != nil {
		return err
	}
	objs = slices.DeleteFunc(objs, func(o *unstructured.Unstructured) bool { return !only(o) })
	slices.Reverse(objs)
	for _, want := range objs {
		if want.GetKind() == "Namespace" && u.o.KeepNamespace {
			continue
		}
		obj := &unstructured.Unstructured{}
		obj.SetGroupVersionKind(want.GroupVersionKind())
		err := u.c.Get(ctx, client.ObjectKeyFromObject(want), obj)
		switch {
		case apierrors.IsNotFound(err) || apimeta.IsNoMatchError(err):
			continue
		case err != nil:
			return fmt.Errorf("reading %s: %w", Describe(want), err)
		case !obj.GetDeletionTimestamp().IsZero():
			continue
		}
		if err := u.c.Delete(ctx, obj); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting %s: %w", Describe(want), err)
		}
		if want.GetKind() == "Namespace" {
			u.say("%s deleted, with everything in it (the repository's and the webhook's credentials Secrets; --keep-namespace keeps them)", Describe(want))
			continue
		}
		u.say("%s deleted", Describe(want))
	}
	return nil
}
