package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// newHistoryCmd builds `styrminctl history NAME`: the instance timeline of
// a deployment as the cluster ran it.
func newHistoryCmd(g *globalOptions, load restConfigFunc, stdout io.Writer) *cobra.Command {
	o := newClusterOptions(load)
	var fromGit bool
	cmd := &cobra.Command{
		Use:   "history NAME|CLUSTER/ENV/NAME",
		Short: "Show a deployment's instance timeline: sequence, commit, workflow, result",
		Long: "Show every instance of a deployment the agent of a cluster took on, oldest\n" +
			"first: its sequence, the lock commit, the workflow that applied it and how that\n" +
			"task ended; the active one is marked. The backups and restores the deployment ran\n" +
			"follow, apart: they make no instance (each ran on the instance active after the\n" +
			"sequence it names). A bare NAME must name one deployment of the cluster (of the\n" +
			"namespace -n names, when given). -o name prints each instance's task as\n" +
			"NAMESPACE/TASK.\n\n" +
			"With --from-git, the whole timeline comes from the git history of --repo instead: every\n" +
			"lock commit of the deployment reachable from HEAD (the cluster keeps only the newest\n" +
			"tasks), with its author, date, the configuration commit it locked and the workflow\n" +
			"it selects; no cluster is read. A bare NAME must name one lockfile.",
		Example: `  styrminctl history hub
  styrminctl history local/dev/hub -o wide
  styrminctl history web -n dev-web -o json
  styrminctl history local/dev/hub --from-git --repo ./desired-state`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if fromGit {
				return runHistoryFromGit(g.Repo, stdout, o.output, args[0])
			}
			c, err := o.client()
			if err != nil {
				return err
			}
			return runHistory(cmd.Context(), c, stdout, o.output, o.namespace(), args[0])
		},
	}
	o.addFlags(cmd, listOutputs()...)
	cmd.Flags().BoolVar(&fromGit, "from-git", false, "read the whole timeline from the git history of --repo (every lock commit), not from a cluster")
	return cmd
}

// historyEntry is one instance of a deployment.
type historyEntry struct {
	Sequence     int64  `json:"sequence"`
	Commit       string `json:"commit"`
	SourceCommit string `json:"sourceCommit,omitempty"`
	Kind         string `json:"kind"`
	Driver       string `json:"driver,omitempty"`
	AppVersion   string `json:"appVersion,omitempty"`
	Workflow     string `json:"workflow"`
	Result       string `json:"result"`
	Task         string `json:"task"`
	Finished     string `json:"finishedAt,omitempty"`
	Active       bool   `json:"active,omitempty"`
	Message      string `json:"message,omitempty"`
}

// historyOperation is a backup or a restore a task of the deployment
// ran: no instance of its own, run on the one active after the change of
// sequence After.
type historyOperation struct {
	After    int64  `json:"afterSequence"`
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	BackupID string `json:"backupID"`
	Attempt  int32  `json:"attempt,omitempty"`
	Result   string `json:"result"`
	Task     string `json:"task"`
	Finished string `json:"finishedAt,omitempty"`
	Message  string `json:"message,omitempty"`
}

type history struct {
	Deployment string         `json:"deployment"`
	Namespace  string         `json:"namespace"`
	Entries    []historyEntry `json:"entries"`
	// Operations are apart from Entries: a backup's task carries the
	// sequence of the change before it, and shown as an instance it was
	// a second row of that sequence, marked active too.
	Operations []historyOperation `json:"operations,omitempty"`
}

func runHistory(ctx context.Context, c client.Reader, w io.Writer, output, namespace, name string) error {
	did, err := resolveDeployment(ctx, c, namespace, name)
	if err != nil {
		return err
	}
	tasks, err := listTasks(ctx, c, namespace, &did)
	if err != nil {
		return err
	}
	h := history{Deployment: did.String(), Entries: []historyEntry{}}
	var active int64
	var sds v1alpha1.StyrminDeploymentList
	if err := c.List(ctx, &sds, append(inNamespace(namespace), client.MatchingLabels(did.Labels()))...); err != nil {
		return fmt.Errorf("listing StyrminDeployments: %w", err)
	}
	if len(sds.Items) > 0 {
		active = sds.Items[0].Status.ActiveSequence
		h.Namespace = sds.Items[0].Namespace
	}
	for i := range tasks {
		t := &tasks[i]
		s := summarizeTask(t)
		h.Namespace = t.Namespace
		if op := t.Spec.Operation; op != nil {
			h.Operations = append(h.Operations, historyOperation{
				After: t.Spec.ToSequence, Kind: s.Workflow, Name: op.Name, BackupID: op.BackupID, Attempt: op.Attempt,
				Result: s.Phase, Task: t.Name, Finished: s.Finished, Message: s.Message,
			})
			continue
		}
		e := historyEntry{
			Sequence: t.Spec.ToSequence, Commit: t.Spec.Lock.Commit, Workflow: s.Workflow,
			Result: s.Phase, Task: t.Name, Finished: s.Finished, Message: s.Message,
			Active: active != 0 && t.Spec.ToSequence == active,
		}
		switch in, tg := t.Spec.Instance, t.Spec.Target; {
		case tg != nil:
			e.Kind, e.SourceCommit, e.AppVersion = tg.Kind, tg.SourceCommit, tg.AppVersion
			if tg.Driver.Name != "" {
				e.Driver = tg.Driver.String()
			}
		case in != nil:
			e.Kind, e.SourceCommit, e.AppVersion = in.Kind, in.SourceCommit, in.AppVersion
			if in.Driver.Name != "" {
				e.Driver = in.Driver.String()
			}
		}
		if e.Kind == "" {
			e.Kind = v1alpha1.KindInstance
		}
		h.Entries = append(h.Entries, e)
	}
	switch output {
	case outJSON, outYAML:
		return writeData(w, output, h)
	case outName:
		return historyTable(h).print(w, output)
	}
	if len(h.Entries) == 0 && len(h.Operations) == 0 {
		_, err := fmt.Fprintf(w, "%s: no instances in this cluster\n", h.Deployment)
		return err
	}
	fmt.Fprintf(w, "%s (namespace %s)\n\n", h.Deployment, h.Namespace)
	if err := historyTable(h).print(w, output); err != nil {
		return err
	}
	if len(h.Operations) == 0 {
		return nil
	}
	fmt.Fprintln(w, "\nBackups and restores (no instance of their own; each ran after the sequence it names):")
	return operationsTable(h).print(w, output)
}

// historyTable is a deployment's instances; rows are keyed by task.
func historyTable(h history) table {
	t := table{
		header: []string{"SEQUENCE", "COMMIT", "WORKFLOW", "DRIVER", "APP", "RESULT", "FINISHED", ""},
		wide:   []string{"SOURCE COMMIT", "TASK", "MESSAGE"},
		wideAt: 7,
		empty:  "no instances in this cluster (it keeps only the newest tasks; --from-git reads every one)",
	}
	for _, e := range h.Entries {
		mark := ""
		if e.Active {
			mark = "← active"
		}
		driver := e.Driver
		if e.Kind == v1alpha1.KindTombstone {
			driver = "(deleted)"
		}
		key := h.Namespace + "/" + e.Task
		t.rows = append(t.rows, row{
			key: key, name: key, data: e,
			cells: []string{fmt.Sprint(e.Sequence), shortCommit(e.Commit), e.Workflow, driver, e.AppVersion, e.Result, e.Finished, mark},
			wide:  []string{shortCommit(e.SourceCommit), e.Task, firstLine(e.Message)},
		})
	}
	return t
}

// operationsTable is the backups and restores of a deployment, in the
// order they ran.
func operationsTable(h history) table {
	t := table{
		header: []string{"AFTER", "OPERATION", "NAME", "BACKUP", "RESULT", "FINISHED"},
		wide:   []string{"TASK", "MESSAGE"},
	}
	for _, o := range h.Operations {
		name := o.Name
		if o.Attempt > 1 {
			name = fmt.Sprintf("%s (attempt %d)", o.Name, o.Attempt)
		}
		key := h.Namespace + "/" + o.Task
		t.rows = append(t.rows, row{
			key: key, name: key, data: o,
			cells: []string{fmt.Sprint(o.After), o.Kind, name, o.BackupID, o.Result, o.Finished},
			wide:  []string{o.Task, firstLine(o.Message)},
		})
	}
	return t
}

// resolveDeployment turns "cluster/env/name" or a bare "name" into a
// deployment, looking a bare name up among the cluster's tasks.
func resolveDeployment(ctx context.Context, c client.Reader, namespace, name string) (v1alpha1.DeploymentID, error) {
	if strings.Contains(name, "/") {
		id, err := resolver.ParseID(name)
		if err != nil {
			return v1alpha1.DeploymentID{}, err
		}
		return operator.DeploymentID(id), nil
	}
	var list v1alpha1.StyrminTaskList
	if err := c.List(ctx, &list, append(inNamespace(namespace), client.MatchingLabels{v1alpha1.LabelDeployment: name})...); err != nil {
		return v1alpha1.DeploymentID{}, fmt.Errorf("listing StyrminTasks: %w", err)
	}
	found := map[string]v1alpha1.DeploymentID{}
	for _, t := range list.Items {
		found[t.Spec.Deployment.String()] = t.Spec.Deployment
	}
	switch len(found) {
	case 0:
		return v1alpha1.DeploymentID{}, fmt.Errorf("no deployment named %s in this cluster", name)
	case 1:
		for _, id := range found {
			return id, nil
		}
	}
	var ids []string
	for k := range found {
		ids = append(ids, k)
	}
	slices.Sort(ids)
	return v1alpha1.DeploymentID{}, fmt.Errorf("%s names several deployments (%s): give CLUSTER/ENV/NAME", name, strings.Join(ids, ", "))
}
