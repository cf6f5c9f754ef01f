package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// clusterOptions are the flags of the commands that read a cluster:
// kubectl's (kubeOptions), -n/-A and -o.
type clusterOptions struct {
	kube   *kubeOptions
	output string
}

func newClusterOptions(load restConfigFunc) *clusterOptions {
	return &clusterOptions{kube: newKubeOptions(load)}
}

// addFlags registers kubectl's flags, -n/-A and -o with the accepted
// values.
func (o *clusterOptions) addFlags(cmd *cobra.Command, outputs ...string) {
	o.kube.register(cmd, filterNamespace, "")
	addOutputFlag(cmd, &o.output, outputs...)
	cmd.Long += kubeconfigHelp
}

func (o *clusterOptions) client() (client.Reader, error) { return o.kube.client() }

// namespace is the namespace -n keeps, "" for all.
func (o *clusterOptions) namespace() string { return o.kube.namespace }

// newStatusCmd builds `styrminctl status [CLUSTER/ENV/NAME]`: the
// deployments of a cluster as the agent reports them, or one in detail.
func newStatusCmd(load restConfigFunc, stdout io.Writer) *cobra.Command {
	o := newClusterOptions(load)
	var watch bool
	cmd := &cobra.Command{
		Use:   "status [CLUSTER/ENV/NAME]",
		Short: "Show the deployments running in a cluster (or one in detail)",
		Long: "Show what the agent of a cluster reports: every StyrminDeployment with its\n" +
			"sequence, active sequence, driver, application version and readiness, and the\n" +
			"repository position the agent synced; with a deployment, its conditions,\n" +
			"components, release and latest tasks. Deployments of every namespace are\n" +
			"shown (-A, the default); -n NAMESPACE keeps one. With -w, the table is printed,\n" +
			"then each deployment again when it changes (read every second), until interrupted.",
		Example: `  styrminctl status
  styrminctl status -o wide --context prod
  styrminctl status -n dev-hub -w
  styrminctl status local/dev/hub -o yaml`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			if len(args) == 1 {
				if watch {
					return errors.New("--watch shows the list: give no deployment")
				}
				id, err := resolver.ParseID(args[0])
				if err != nil {
					return err
				}
				if o.output == outWide || o.output == outName {
					return fmt.Errorf("-o %s is for the list: give no deployment", o.output)
				}
				return runStatusOne(cmd.Context(), c, stdout, o.output, id)
			}
			if watch {
				return watchList(cmd.Context(), stdout, o.output, func(ctx context.Context) (table, error) {
					st, err := collectStatus(ctx, c, o.namespace())
					return statusTable(st), err
				})
			}
			return runStatusAll(cmd.Context(), c, stdout, o.output, o.namespace())
		},
	}
	o.addFlags(cmd, listOutputs()...)
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after the list, print each deployment again when it changes, until interrupted")
	return cmd
}

// deploymentStatus is one line of `status`.
type deploymentStatus struct {
	Deployment      string `json:"deployment"`
	Namespace       string `json:"namespace"`
	Sequence        int64  `json:"sequence"`
	AppliedSequence int64  `json:"appliedSequence"`
	ActiveSequence  int64  `json:"activeSequence"`
	Driver          string `json:"driver,omitempty"`
	AppVersion      string `json:"appVersion,omitempty"`
	Ready           string `json:"ready"`
	Reason          string `json:"reason,omitempty"`
	Message         string `json:"message,omitempty"`
	// Internal is the service an internal deployment provides (ingress);
	// absent for applications.
	Internal string `json:"internal,omitempty"`
	// Waiting says why the locked instance's task has not started: the
	// instances it runs after (a wave before, what it connects to).
	Waiting string `json:"waiting,omitempty"`
	// Held says why the locked instance's task waits for a restore of the
	// deployment (running, or failed and not retried or deleted).
	Held string `json:"held,omitempty"`
	// Failed names the deployment's newest change when its task failed
	// (the task, its step and why): the workloads may be Ready on the
	// instance before it, and the deployment is behind git.
	Failed string `json:"failed,omitempty"`
	// Withdrawn names the deployment's newest change when it was
	// superseded before it ran by a change withdrawn from the branch since
	// (a force push, a rewind): neither was applied, and the workloads may
	// be Ready on the instance before them.
	Withdrawn string `json:"withdrawn,omitempty"`
}

// sourceStatus is the sync position of an agent.
type sourceStatus struct {
	Name             string `json:"name"`
	Cluster          string `json:"cluster"`
	URL              string `json:"url"`
	Branch           string `json:"branch,omitempty"`
	LastSyncedCommit string `json:"lastSyncedCommit,omitempty"`
	LastSyncTime     string `json:"lastSyncTime,omitempty"`
	Ready            string `json:"ready"`
	Message          string `json:"message,omitempty"`
	// Locked is the lock mode's outcome at the last configuration head
	// (its Locked condition: True, False; empty outside lock mode), with
	// its reason and message: deployments it held back keep what they
	// run.
	Locked        string `json:"locked,omitempty"`
	LockedReason  string `json:"lockedReason,omitempty"`
	LockedMessage string `json:"lockedMessage,omitempty"`
	// Refused are the lockfiles the agent refused with no change of their
	// deployment made since: git says more than the cluster runs.
	Refused []refusedLock `json:"refused,omitempty"`
}

// refusedLock is a lockfile the agent did not apply.
type refusedLock struct {
	Deployment string `json:"deployment"`
	Commit     string `json:"commit"`
	Path       string `json:"path"`
	Reason     string `json:"reason"`
	Message    string `json:"message"`
}

type clusterStatus struct {
	Sources     []sourceStatus     `json:"sources"`
	Deployments []deploymentStatus `json:"deployments"`
}

func summarizeDeployment(sd *v1alpha1.StyrminDeployment) deploymentStatus {
	s := deploymentStatus{
		Deployment:      sd.Spec.Deployment.String(),
		Namespace:       sd.Namespace,
		Sequence:        sd.Spec.Sequence,
		AppliedSequence: sd.Status.AppliedSequence,
		ActiveSequence:  sd.Status.ActiveSequence,
		AppVersion:      sd.Spec.AppVersion,
		Ready:           "Unknown",
		Internal:        sd.Spec.Internal,
	}
	if sd.Spec.Driver.Name != "" {
		s.Driver = sd.Spec.Driver.String()
	}
	if sd.Spec.Tombstone() {
		s.Driver = "(tombstone)"
	}
	if c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		s.Ready, s.Reason, s.Message = string(c.Status), c.Reason, c.Message
	}
	return s
}

// collectStatus reads the cluster's sources and the deployments of
// namespace ("" for all).
func collectStatus(ctx context.Context, c client.Reader, namespace string) (clusterStatus, error) {
	out := clusterStatus{Sources: []sourceStatus{}, Deployments: []deploymentStatus{}}
	var sds v1alpha1.StyrminDeploymentList
	if err := c.List(ctx, &sds, inNamespace(namespace)...); err != nil {
		return out, fmt.Errorf("listing StyrminDeployments: %w", err)
	}
	var srcs v1alpha1.StyrminSourceList
	if err := c.List(ctx, &srcs); err != nil {
		return out, fmt.Errorf("listing StyrminSources: %w", err)
	}
	for i := range srcs.Items {
		s := &srcs.Items[i]
		ss := sourceStatus{
			Name: s.Namespace + "/" + s.Name, Cluster: s.Spec.Cluster, URL: s.Spec.URL, Branch: s.Spec.Branch,
			LastSyncedCommit: s.Status.LastSyncedCommit, Ready: "Unknown",
		}
		if s.Status.LastSyncTime != nil {
			ss.LastSyncTime = s.Status.LastSyncTime.UTC().Format(time.RFC3339)
		}
		if cond := apimeta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); cond != nil {
			ss.Ready, ss.Message = string(cond.Status), cond.Message
		}
		if cond := apimeta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionLocked); cond != nil {
			ss.Locked, ss.LockedReason, ss.LockedMessage = string(cond.Status), cond.Reason, cond.Message
		}
		out.Sources = append(out.Sources, ss)
	}
	var tasks v1alpha1.StyrminTaskList
	if err := c.List(ctx, &tasks, inNamespace(namespace)...); err != nil {
		return out, fmt.Errorf("listing StyrminTasks: %w", err)
	}
	if namespace == "" {
		// The tasks of every namespace tell which refusals a later change
		// superseded; -n lists one namespace's.
		for i := range out.Sources {
			out.Sources[i].Refused = standingRefusals(&srcs.Items[i], tasks.Items)
		}
	}
	waiting := waitingTasks(tasks.Items)
	failed, withdrawn := map[string]string{}, map[string]string{}
	for _, st := range operator.StandingsOf(sds.Items, tasks.Items) {
		switch {
		case st.Failed:
			failed[st.Namespace] = st.Reason
		case st.Behind && st.Change.Status.Phase == v1alpha1.TaskSuperseded:
			withdrawn[st.Namespace] = st.Reason
		}
	}
	for i := range sds.Items {
		d := summarizeDeployment(&sds.Items[i])
		if why := failed[sds.Items[i].Namespace]; why != "" {
			d.Failed = why
			d.Reason, d.Message = v1alpha1.ReasonTaskFailed, why
		}
		if why := withdrawn[sds.Items[i].Namespace]; why != "" {
			d.Withdrawn = why
			d.Reason, d.Message = v1alpha1.ReasonTaskWithdrawn, why
		}
		if t := waiting[sds.Items[i].Namespace]; t != nil && t.Spec.ToSequence > d.ActiveSequence {
			cond := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionReady)
			why := fmt.Sprintf("sequence %d: %s", t.Spec.ToSequence, cond.Message)
			if cond.Reason == v1alpha1.ReasonRestoreInProgress {
				d.Held = why
			} else {
				d.Waiting = why
			}
			d.Reason, d.Message = cond.Reason, why
		}
		out.Deployments = append(out.Deployments, d)
	}
	slices.SortFunc(out.Sources, func(a, b sourceStatus) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(out.Deployments, func(a, b deploymentStatus) int { return strings.Compare(a.Deployment, b.Deployment) })
	return out, nil
}

// standingRefusals are src's refused lockfiles that no change of their
// deployment superseded: a task past the refusal's sequence (or, when it
// knows none, a task made after it).
func standingRefusals(src *v1alpha1.StyrminSource, tasks []v1alpha1.StyrminTask) []refusedLock {
	var out []refusedLock
	for _, r := range src.Status.Refused {
		id, ok := resolver.IDFromLockPath(r.Path)
		name := r.Path
		if ok {
			name = id.String()
			if slices.ContainsFunc(tasks, func(t v1alpha1.StyrminTask) bool {
				if t.Spec.Operation != nil || t.Spec.Deployment.String() != id.String() {
					return false
				}
				if r.Sequence > 0 {
					return t.Spec.ToSequence > r.Sequence
				}
				return t.CreationTimestamp.After(r.Time.Time)
			}) {
				continue
			}
		}
		out = append(out, refusedLock{Deployment: name, Commit: r.Commit, Path: r.Path, Reason: r.Reason, Message: r.Message})
	}
	return out
}

// waitingTasks maps each deployment (by namespace) to its newest task
// that waits for the order of its lock (the instances it runs after: a
// wave before, what it connects to), a restore, or the uninstall of a
// deletion whose task failed. The StyrminDeployment moves to a
// sequence only when its task starts, so only the tasks tell.
func waitingTasks(tasks []v1alpha1.StyrminTask) map[string]*v1alpha1.StyrminTask {
	out := map[string]*v1alpha1.StyrminTask{}
	for i := range tasks {
		t := &tasks[i]
		cond := apimeta.FindStatusCondition(t.Status.Conditions, v1alpha1.ConditionReady)
		if t.Status.Phase != v1alpha1.TaskPending || cond == nil || (cond.Reason != v1alpha1.ReasonWaitingForOrder && cond.Reason != v1alpha1.ReasonRestoreInProgress && cond.Reason != v1alpha1.ReasonDeletionInProgress) {
			continue
		}
		if prev := out[t.Namespace]; prev == nil || prev.Spec.ToSequence < t.Spec.ToSequence {
			out[t.Namespace] = t
		}
	}
	return out
}

// inNamespace is the list option of -n ("" for every namespace).
func inNamespace(namespace string) []client.ListOption {
	if namespace == "" {
		return nil
	}
	return []client.ListOption{client.InNamespace(namespace)}
}

// statusTable is the deployments' table; rows are keyed by deployment.
func statusTable(st clusterStatus) table {
	t := table{
		header: []string{"DEPLOYMENT", "NAMESPACE", "SEQUENCE", "ACTIVE", "DRIVER", "APP", "READY", "REASON"},
		wide:   []string{"APPLIED", "MESSAGE"},
		empty:  "no deployments",
	}
	for _, d := range st.Deployments {
		t.rows = append(t.rows, row{
			key: d.Deployment, name: d.Deployment, data: d,
			cells: []string{d.Deployment + internalMark(d.Internal), d.Namespace, fmt.Sprint(d.Sequence), fmt.Sprint(d.ActiveSequence), d.Driver, d.AppVersion, d.Ready, d.Reason},
			wide:  []string{fmt.Sprint(d.AppliedSequence), firstLine(d.Message)},
		})
	}
	return t
}

func runStatusAll(ctx context.Context, c client.Reader, w io.Writer, output, namespace string) error {
	out, err := collectStatus(ctx, c, namespace)
	if err != nil {
		return err
	}
	switch output {
	case outJSON, outYAML:
		return writeData(w, output, out)
	case outName:
		return statusTable(out).print(w, output)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, s := range out.Sources {
		fmt.Fprintf(tw, "source %s: cluster %s, %s %s, synced %s (%s)\n", s.Name, s.Cluster, s.URL, s.Branch, shortCommit(s.LastSyncedCommit), readyWord(s.Ready, s.Message))
		if s.Locked == string(metav1.ConditionFalse) {
			// The lock mode held deployments back: git asks for more
			// than was locked, whatever the table below says.
			fmt.Fprintf(tw, "  not locked (%s): %s\n", s.LockedReason, s.LockedMessage)
		}
	}
	if len(out.Sources) > 0 {
		fmt.Fprintln(tw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := statusTable(out).print(w, output); err != nil {
		return err
	}
	if err := printWaiting(w, out.Deployments); err != nil {
		return err
	}
	return printRefused(w, out.Sources)
}

// printRefused lists the lockfiles the agent refused that no later change
// of their deployment superseded: the table shows such a deployment as it
// runs, behind git.
func printRefused(w io.Writer, srcs []sourceStatus) error {
	first := true
	for _, s := range srcs {
		for _, r := range s.Refused {
			if first {
				if _, err := fmt.Fprintln(w, "\nlockfiles the agent refused (the deployment runs what it ran; lock again once fixed):"); err != nil {
					return err
				}
				first = false
			}
			if _, err := fmt.Fprintf(w, "  %s: %s at %s: %s\n", r.Deployment, r.Reason, shortCommit(r.Commit), firstLine(r.Message)); err != nil {
				return err
			}
		}
	}
	return nil
}

// printWaiting says, under the table, why each deployment behind its lock
// has not started: the reason column alone does not name what it waits
// for (a failed wave before, say).
func printWaiting(w io.Writer, ds []deploymentStatus) error {
	for _, part := range []struct {
		heading string
		why     func(deploymentStatus) string
	}{
		{"waiting for the order of their lock, or a deletion's uninstall:", func(d deploymentStatus) string { return d.Waiting }},
		{"held by a restore:", func(d deploymentStatus) string { return d.Held }},
		{"newest change failed (styrminctl retry, or change the configuration):", func(d deploymentStatus) string { return d.Failed }},
		{"newest change not applied, superseded by one withdrawn from the branch (a lock past the sequence the cluster used applies it):", func(d deploymentStatus) string { return d.Withdrawn }},
	} {
		first := true
		for _, d := range ds {
			why := part.why(d)
			if why == "" {
				continue
			}
			if first {
				if _, err := fmt.Fprintln(w, "\n"+part.heading); err != nil {
					return err
				}
				first = false
			}
			if _, err := fmt.Fprintf(w, "  %s: %s\n", d.Deployment, why); err != nil {
				return err
			}
		}
	}
	return nil
}

func shortCommit(c string) string {
	if c == "" {
		return "nothing yet"
	}
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

func readyWord(status, msg string) string {
	switch status {
	case "True":
		return "ok"
	case "False":
		return "failing: " + msg
	}
	return "unknown"
}

// deploymentDetail is `status CLUSTER/ENV/NAME`.
type deploymentDetail struct {
	deploymentStatus
	Annotation  string                     `json:"annotationSequence,omitempty"`
	Digest      string                     `json:"digest,omitempty"`
	Release     *v1alpha1.ReleaseStatus    `json:"release,omitempty"`
	Conditions  []metav1.Condition         `json:"conditions,omitempty"`
	Components  []v1alpha1.ComponentStatus `json:"components,omitempty"`
	LastDrift   *v1alpha1.DriftCorrection  `json:"lastDriftCorrection,omitempty"`
	Corrections int64                      `json:"driftCorrections,omitempty"`
	Tasks       []taskSummary              `json:"tasks"`
	Deleted     bool                       `json:"deleted,omitempty"`
	// Behind says why the newest sequence is not the active one: the task
	// that failed or waits, and its step.
	Behind string `json:"behind,omitempty"`
}

// latestTasks is how many of a deployment's changes `status` shows, and
// latestOperations how many of its operations (backups, restores) beside
// them: counted apart, so nightly backups never hide the last changes.
const (
	latestTasks      = 5
	latestOperations = 3
)

// latestOf keeps, in their order, the last latestTasks changes and the
// last latestOperations operations of tasks (in run order).
func latestOf(tasks []v1alpha1.StyrminTask) []v1alpha1.StyrminTask {
	changes, ops := 0, 0
	keep := make([]bool, len(tasks))
	for i := len(tasks) - 1; i >= 0; i-- {
		switch {
		case tasks[i].Spec.Operation == nil && changes < latestTasks:
			changes++
			keep[i] = true
		case tasks[i].Spec.Operation != nil && ops < latestOperations:
			ops++
			keep[i] = true
		}
	}
	var out []v1alpha1.StyrminTask
	for i := range tasks {
		if keep[i] {
			out = append(out, tasks[i])
		}
	}
	return out
}

func runStatusOne(ctx context.Context, c client.Reader, w io.Writer, output string, id resolver.ID) error {
	did := operator.DeploymentID(id)
	var sds v1alpha1.StyrminDeploymentList
	if err := c.List(ctx, &sds, client.MatchingLabels(did.Labels())); err != nil {
		return fmt.Errorf("listing StyrminDeployments: %w", err)
	}
	tasks, err := listTasks(ctx, c, "", &did)
	if err != nil {
		return err
	}
	if len(sds.Items) == 0 && len(tasks) == 0 {
		return fmt.Errorf("deployment %s: no StyrminDeployment and no task in this cluster", id)
	}
	d := deploymentDetail{Tasks: []taskSummary{}}
	if len(sds.Items) == 0 {
		d.deploymentStatus = deploymentStatus{Deployment: id.String(), Namespace: tasks[0].Namespace, Ready: "Unknown"}
		d.Deleted = true
	} else {
		sd := &sds.Items[0]
		d.deploymentStatus = summarizeDeployment(sd)
		d.Annotation = sd.Annotations[v1alpha1.AnnotationInstanceSequence]
		d.Digest = sd.Spec.Digest
		d.Release = sd.Status.Release
		d.Conditions = sd.Status.Conditions
		d.Components = sd.Status.Components
		d.LastDrift = sd.Status.LastDriftCorrection
		d.Corrections = sd.Status.DriftCorrections
	}
	for _, t := range latestOf(tasks) {
		d.Tasks = append(d.Tasks, summarizeTask(&t))
	}
	for _, st := range operator.StandingsOf(sds.Items, tasks) {
		if st.Behind {
			d.Behind = st.Reason
		}
	}
	if output != outText {
		return writeData(w, output, d)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Deployment:\t%s\n", d.Deployment)
	fmt.Fprintf(tw, "Namespace:\t%s\n", d.Namespace)
	if d.Deleted {
		fmt.Fprintf(tw, "State:\tdeleted (no StyrminDeployment)\n")
	} else {
		fmt.Fprintf(tw, "Sequence:\t%d (annotation %s, applied %d, active %d)\n", d.Sequence, noneIfEmpty(d.Annotation), d.AppliedSequence, d.ActiveSequence)
		if d.Internal != "" {
			fmt.Fprintf(tw, "Internal:\t%s (added by Styrmin, not redeployed by fan-outs)\n", d.Internal)
		}
		fmt.Fprintf(tw, "Driver:\t%s\n", d.Driver)
		fmt.Fprintf(tw, "App version:\t%s\n", d.AppVersion)
		if d.Release != nil {
			fmt.Fprintf(tw, "Release:\t%s revision %d (%s, %s)\n", d.Release.Name, d.Release.Revision, d.Release.Chart, d.Release.Status)
		}
		for _, cond := range d.Conditions {
			fmt.Fprintf(tw, "%s:\t%s %s %s\n", cond.Type, cond.Status, cond.Reason, cond.Message)
		}
		if d.Corrections > 0 && d.LastDrift != nil {
			fmt.Fprintf(tw, "Drift:\t%d corrections, last at %s\n", d.Corrections, d.LastDrift.Time.UTC().Format(time.RFC3339))
		}
	}
	if d.Behind != "" {
		fmt.Fprintf(tw, "Behind git:\t%s\n", d.Behind)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(d.Components) > 0 {
		fmt.Fprintln(w)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "COMPONENT\tREADY\tPODS")
		for _, cs := range d.Components {
			fmt.Fprintf(tw, "%s\t%t\t%d/%d\n", cs.Name, cs.Ready, cs.ReadyReplicas, cs.DesiredReplicas)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if err := printPods(w, d.Components); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	return printTaskTable(w, d.Tasks)
}

// internalMark follows an internal deployment's name in the table.
func internalMark(internal string) string {
	if internal == "" {
		return ""
	}
	return " (internal: " + internal + ")"
}

func noneIfEmpty(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// printPods lists the pods the agent reported as not ready, with why.
func printPods(w io.Writer, comps []v1alpha1.ComponentStatus) error {
	var rows []string
	for _, cs := range comps {
		for _, wl := range cs.Workloads {
			for _, p := range wl.Pods {
				rows = append(rows, fmt.Sprintf("%s\t%s/%s\t%s\t%d\t%s\t%s", p.Name, wl.Kind, wl.Name, p.Phase, p.Restarts, noneIfEmpty(p.Reason), p.Message))
			}
		}
	}
	if len(rows) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POD NOT READY\tWORKLOAD\tPHASE\tRESTARTS\tREASON\tMESSAGE")
	for _, r := range rows {
		fmt.Fprintln(tw, r)
	}
	return tw.Flush()
}
