package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// newTasksCmd builds `styrminctl tasks list|get`: the tasks the agent of
// a cluster runs, one per (deployment, sequence).
func newTasksCmd(load restConfigFunc, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tasks",
		Short: "List and show the tasks the agent runs in a cluster",
		Example: `  styrminctl tasks list --unfinished -w
  styrminctl tasks get -n dev-hub hub-3`,
	}
	cmd.AddCommand(newTasksListCmd(load, stdout), newTasksGetCmd(load, stdout))
	return cmd
}

func newTasksListCmd(load restConfigFunc, stdout io.Writer) *cobra.Command {
	o := newClusterOptions(load)
	var deployment string
	var unfinished, watch bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List tasks, by deployment and sequence",
		Long: "List the tasks of every namespace (-A, the default) or of one (-n), sorted by\n" +
			"deployment and sequence. -o name prints NAMESPACE/TASK, as tasks get takes it.\n" +
			"With -w, the list is printed, then each task again when it changes (read every\n" +
			"second), until interrupted.",
		Example: `  styrminctl tasks list
  styrminctl tasks list --deployment local/dev/hub -o wide
  styrminctl tasks list --unfinished -w`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			var did *v1alpha1.DeploymentID
			if deployment != "" {
				id, err := resolver.ParseID(deployment)
				if err != nil {
					return fmt.Errorf("--deployment: %w", err)
				}
				d := operator.DeploymentID(id)
				did = &d
			}
			read := func(ctx context.Context) (table, error) {
				tasks, err := listTasks(ctx, c, o.namespace(), did)
				if err != nil {
					return table{}, err
				}
				out := []taskSummary{}
				for i := range tasks {
					if unfinished && tasks[i].Status.Phase.Terminal() {
						continue
					}
					out = append(out, summarizeTask(&tasks[i]))
				}
				return taskTable(out), nil
			}
			if watch {
				return watchList(cmd.Context(), stdout, o.output, read)
			}
			t, err := read(cmd.Context())
			if err != nil {
				return err
			}
			return t.print(stdout, o.output)
		},
	}
	o.addFlags(cmd, listOutputs()...)
	cmd.Flags().StringVar(&deployment, "deployment", "", "only the tasks of this deployment (CLUSTER/ENV/NAME)")
	cmd.Flags().BoolVar(&unfinished, "unfinished", false, "only the tasks that are pending or running")
	cmd.Flags().BoolVarP(&watch, "watch", "w", false, "after the list, print each task again when it changes, until interrupted")
	return cmd
}

func newTasksGetCmd(load restConfigFunc, stdout io.Writer) *cobra.Command {
	o := newClusterOptions(load)
	cmd := &cobra.Command{
		Use:   "get [NAMESPACE/]NAME",
		Short: "Show one task with its steps, their state, timings and output",
		Long: "Show one task: its lock, phase and every step with its state, timings and\n" +
			"output. Without -n (or NAMESPACE/) every namespace is searched.",
		Example: `  styrminctl tasks get hub-3
  styrminctl tasks get dev-hub/hub-3 -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.client()
			if err != nil {
				return err
			}
			namespace, name := o.namespace(), args[0]
			if ns, n, ok := strings.Cut(name, "/"); ok && namespace == "" {
				namespace, name = ns, n
			}
			task, err := findTask(cmd.Context(), c, namespace, name)
			if err != nil {
				return err
			}
			d := detailTask(task)
			if o.output != outText {
				return writeData(stdout, o.output, d)
			}
			return printTaskDetail(stdout, d)
		},
	}
	o.addFlags(cmd, dataOutputs()...)
	return cmd
}

// listTasks lists tasks (of one namespace and/or deployment), sorted by
// deployment and then as the agent runs them (compareTasks).
func listTasks(ctx context.Context, c client.Reader, namespace string, did *v1alpha1.DeploymentID) ([]v1alpha1.StyrminTask, error) {
	var opts []client.ListOption
	if namespace != "" {
		opts = append(opts, client.InNamespace(namespace))
	}
	if did != nil {
		opts = append(opts, client.MatchingLabels(did.Labels()))
	}
	var list v1alpha1.StyrminTaskList
	if err := c.List(ctx, &list, opts...); err != nil {
		return nil, fmt.Errorf("listing StyrminTasks: %w", err)
	}
	slices.SortFunc(list.Items, func(a, b v1alpha1.StyrminTask) int { return compareTasks(&a, &b) })
	return list.Items, nil
}

// compareTasks orders tasks by deployment, then as the agent runs them
// (operator/task's runsBefore): by sequence; at one sequence the change
// first, then the operations (backups, restores) ordered after it, in the
// order they were made. An operation task carries the sequence of the
// change before it, so sequence alone left ties that the API server's
// list order broke differently each time; the names end every tie.
func compareTasks(a, b *v1alpha1.StyrminTask) int {
	if c := strings.Compare(a.Spec.Deployment.String(), b.Spec.Deployment.String()); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Spec.ToSequence, b.Spec.ToSequence); c != 0 {
		return c
	}
	if ao, bo := a.Spec.Operation != nil, b.Spec.Operation != nil; ao != bo {
		if ao {
			return 1
		}
		return -1
	}
	return cmp.Or(
		a.CreationTimestamp.Compare(b.CreationTimestamp.Time),
		strings.Compare(a.Namespace, b.Namespace),
		strings.Compare(a.Name, b.Name),
	)
}

// findTask finds a task by name, in one namespace or in all.
func findTask(ctx context.Context, c client.Reader, namespace, name string) (*v1alpha1.StyrminTask, error) {
	if namespace != "" {
		var t v1alpha1.StyrminTask
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, &t); err != nil {
			return nil, fmt.Errorf("task %s/%s: %w", namespace, name, err)
		}
		return &t, nil
	}
	tasks, err := listTasks(ctx, c, "", nil)
	if err != nil {
		return nil, err
	}
	var found []*v1alpha1.StyrminTask
	for i := range tasks {
		if tasks[i].Name == name {
			found = append(found, &tasks[i])
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no task named %s in any namespace", name)
	case 1:
		return found[0], nil
	}
	var nss []string
	for _, t := range found {
		nss = append(nss, t.Namespace)
	}
	return nil, fmt.Errorf("task %s exists in namespaces %s: pick one with -n or NAMESPACE/NAME", name, strings.Join(nss, ", "))
}

// taskSummary is one line of `tasks list`.
type taskSummary struct {
	Namespace  string `json:"namespace"`
	Name       string `json:"name"`
	Deployment string `json:"deployment"`
	Workflow   string `json:"workflow"`
	From       int64  `json:"fromSequence"`
	To         int64  `json:"toSequence"`
	Phase      string `json:"phase"`
	Step       string `json:"step,omitempty"`
	Commit     string `json:"commit"`
	Started    string `json:"startedAt,omitempty"`
	Finished   string `json:"finishedAt,omitempty"`
	Message    string `json:"message,omitempty"`
}

func summarizeTask(t *v1alpha1.StyrminTask) taskSummary {
	s := taskSummary{
		Namespace: t.Namespace, Name: t.Name, Deployment: t.Spec.Deployment.String(),
		Workflow: string(t.Spec.Workflow), From: t.Spec.FromSequence, To: t.Spec.ToSequence,
		Phase: string(t.Status.Phase), Commit: t.Spec.Lock.Commit, Message: t.Status.Message,
	}
	if s.Phase == "" {
		s.Phase = "New"
	}
	if i := int(t.Status.CurrentStep); !t.Status.Phase.Terminal() && i < len(t.Status.Steps) {
		s.Step = fmt.Sprintf("%d/%d %s", i+1, len(t.Status.Steps), t.Status.Steps[i].Name)
	}
	if t.Status.StartedAt != nil {
		s.Started = t.Status.StartedAt.UTC().Format(time.RFC3339)
	}
	if t.Status.FinishedAt != nil {
		s.Finished = t.Status.FinishedAt.UTC().Format(time.RFC3339)
	}
	return s
}

// taskTable is the tasks' table; rows are keyed by namespace and name.
func taskTable(tasks []taskSummary) table {
	t := table{
		header: []string{"NAMESPACE", "TASK", "DEPLOYMENT", "WORKFLOW", "SEQUENCE", "PHASE", "COMMIT", "STEP/MESSAGE"},
		wide:   []string{"STARTED", "FINISHED"},
		wideAt: 7,
		empty:  "no tasks",
	}
	for _, ts := range tasks {
		note := ts.Step
		if note == "" {
			note = firstLine(ts.Message)
		}
		key := ts.Namespace + "/" + ts.Name
		t.rows = append(t.rows, row{
			key: key, name: key, data: ts,
			cells: []string{ts.Namespace, ts.Name, ts.Deployment, ts.Workflow, fmt.Sprintf("%d→%d", ts.From, ts.To), ts.Phase, shortCommit(ts.Commit), note},
			wide:  []string{ts.Started, ts.Finished},
		})
	}
	return t
}

func printTaskTable(w io.Writer, tasks []taskSummary) error {
	return taskTable(tasks).print(w, outText)
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " …"
	}
	return s
}

// taskDetail is `tasks get`.
type taskDetail struct {
	taskSummary
	LockPath     string       `json:"lockPath"`
	SupersededBy int64        `json:"supersededBy,omitempty"`
	Steps        []stepDetail `json:"steps"`
}

type stepDetail struct {
	Name       string            `json:"name"`
	Action     string            `json:"action"`
	Components []string          `json:"components,omitempty"`
	Args       map[string]string `json:"args,omitempty"`
	State      string            `json:"state"`
	Attempts   int32             `json:"attempts,omitempty"`
	Started    string            `json:"startedAt,omitempty"`
	Finished   string            `json:"finishedAt,omitempty"`
	Duration   string            `json:"duration,omitempty"`
	Output     string            `json:"output,omitempty"`
	Message    string            `json:"message,omitempty"`
	Recorded   map[string]string `json:"recorded,omitempty"`
}

func detailTask(t *v1alpha1.StyrminTask) taskDetail {
	d := taskDetail{taskSummary: summarizeTask(t), LockPath: t.Spec.Lock.Path, SupersededBy: t.Status.SupersededBy, Steps: []stepDetail{}}
	for _, s := range t.Status.Steps {
		sd := stepDetail{
			Name: s.Name, Action: s.Action, Components: s.Components, Args: s.Args, State: string(s.State),
			Attempts: s.Attempts, Output: s.Output, Message: s.Message, Recorded: s.Recorded,
		}
		if s.StartedAt != nil {
			sd.Started = s.StartedAt.UTC().Format(time.RFC3339)
			if s.FinishedAt != nil {
				sd.Finished = s.FinishedAt.UTC().Format(time.RFC3339)
				sd.Duration = s.FinishedAt.Sub(s.StartedAt.Time).String()
			}
		}
		d.Steps = append(d.Steps, sd)
	}
	return d
}

func printTaskDetail(w io.Writer, d taskDetail) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Task:\t%s/%s\n", d.Namespace, d.Name)
	fmt.Fprintf(tw, "Deployment:\t%s\n", d.Deployment)
	fmt.Fprintf(tw, "Workflow:\t%s %d→%d\n", d.Workflow, d.From, d.To)
	fmt.Fprintf(tw, "Lock:\t%s at %s\n", d.LockPath, d.Commit)
	fmt.Fprintf(tw, "Phase:\t%s\n", d.Phase)
	if d.Started != "" {
		fmt.Fprintf(tw, "Started:\t%s\n", d.Started)
	}
	if d.Finished != "" {
		fmt.Fprintf(tw, "Finished:\t%s\n", d.Finished)
	}
	if d.SupersededBy > 0 {
		fmt.Fprintf(tw, "Superseded by:\tsequence %d\n", d.SupersededBy)
	}
	if d.Message != "" {
		fmt.Fprintf(tw, "Message:\t%s\n", d.Message)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nSteps:")
	for i, s := range d.Steps {
		line := fmt.Sprintf("  %d. %s  %s", i+1, s.Name, s.State)
		if s.Attempts > 1 {
			line += fmt.Sprintf(" (%d attempts)", s.Attempts)
		}
		if s.Duration != "" {
			line += "  " + s.Duration
		}
		fmt.Fprintln(w, line)
		for _, text := range []string{s.Message, s.Output} {
			for _, l := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
				if l != "" {
					fmt.Fprintln(w, "       "+l)
				}
			}
		}
	}
	return nil
}
