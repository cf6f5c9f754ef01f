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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/operation"
	"github.com/styrmin/styrmin/resolver"
)

// operationOptions are the flags of backup and restore: kubectl's, -n
// (the agent's namespace), and what to make.
type operationOptions struct {
	kube        *kubeOptions
	deployments []string
	name        string
	wait        bool
	timeout     time.Duration
	output      string
}

func (o *operationOptions) writer() (client.Client, error) { return o.kube.writer() }

// checkDeployments checks --deployment before anything is asked or made.
// The agent reads an empty list as "all of the environment's", and pflag
// turns --deployment "" into one, so an explicit flag that names nothing
// would back up or restore every deployment; an empty or malformed name
// ("hub,") would make an object the agent only refuses later.
func (o *operationOptions) checkDeployments(cmd *cobra.Command) error {
	if !cmd.Flags().Changed("deployment") {
		return nil
	}
	given := strings.Join(o.deployments, ",")
	if len(o.deployments) == 0 {
		return usageError{fmt.Errorf("--deployment %q: expected deployment names (omit the flag for all of the environment's deployments)", given)}
	}
	for _, n := range o.deployments {
		if !resolver.IsName(n) {
			return usageError{fmt.Errorf("--deployment %q: %q is no deployment name: expected deployment names, each a lowercase DNS label of at most %d characters, comma-separated (omit the flag for all of the environment's deployments)",
				given, n, resolver.MaxNameLen)}
		}
	}
	return nil
}

// checkTimeout checks --timeout before anything is made: with --wait a
// timeout of 0 or less would end the wait at once, after the object was
// created, as a failure ("context deadline exceeded").
func (o *operationOptions) checkTimeout() error {
	if o.wait && o.timeout <= 0 {
		return usageError{fmt.Errorf("--timeout %s: expected a positive duration", o.timeout)}
	}
	return nil
}

// parseEnvironment parses CLUSTER/ENV.
func parseEnvironment(s string) (cluster, env string, err error) {
	parts := strings.Split(s, "/")
	if len(parts) != 2 || slices.Contains(parts, "") {
		return "", "", usageError{fmt.Errorf("%q: expected CLUSTER/ENVIRONMENT", s)}
	}
	return parts[0], parts[1], nil
}

// newBackupCmd builds `styrminctl backup create|list|get`.
func newBackupCmd(load restConfigFunc, now func() time.Time, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Back up an environment (its drivers' backup hooks), list and show backups",
		Example: `  styrminctl backup create local/dev --wait
  styrminctl backup list local/dev
  styrminctl backup get dev-20261201-0300`,
	}
	o := &operationOptions{kube: newKubeOptions(load)}
	create := &cobra.Command{
		Use:   "create CLUSTER/ENV",
		Short: "Back up the deployments of an environment",
		Long: `create makes a StyrminBackup: the agent runs each deployment's driver backup hook
as a task of that deployment (ordered with its other tasks) and records where each
artefact went. A backup is refused, changing nothing, when the environment has no
backupLocation, its Secret cannot reach it, or a deployment named has no backup hook in
its driver or no pvc:// location's claim in its namespace; a backup of the whole
environment skips such deployments (backup get lists them) unless none is left.
With --wait it waits for the result and fails when the backup failed.` + kubeconfigHelp,
		Example: `  styrminctl backup create local/dev --wait
  styrminctl backup create local/dev --deployment hub --name before-migration`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cluster, env, err := parseEnvironment(args[0])
			if err != nil {
				return err
			}
			if err := o.checkDeployments(cmd); err != nil {
				return err
			}
			if err := o.checkTimeout(); err != nil {
				return err
			}
			b, err := operation.NewBackup(operation.BackupRequest{Namespace: o.kube.namespace, Cluster: cluster, Environment: env, Deployments: o.deployments, Name: o.name, Now: now()})
			if err != nil {
				return usageError{err}
			}
			c, err := o.writer()
			if err != nil {
				return err
			}
			if err := c.Create(cmd.Context(), b); err != nil {
				return fmt.Errorf("creating StyrminBackup %s/%s: %w", b.Namespace, b.Name, err)
			}
			fmt.Fprintf(stdout, "backup %s of %s/%s created\n", b.Name, cluster, env)
			if !o.wait {
				return nil
			}
			return waitOperation(cmd.Context(), c, b, o.timeout, func() (v1alpha1.OperationPhase, string, []v1alpha1.OperationDeployment) {
				return b.Status.Phase, b.Status.Message, b.Status.Deployments
			}, stdout)
		},
	}
	o.register(create, true)
	list := &cobra.Command{
		Use:   "list [CLUSTER/ENV]",
		Short: "List the backups (of one environment)",
		Example: `  styrminctl backup list
  styrminctl backup list local/dev -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The argument is checked before the cluster is asked.
			var cluster, env string
			if len(args) == 1 {
				var err error
				if cluster, env, err = parseEnvironment(args[0]); err != nil {
					return err
				}
			}
			c, err := o.kube.client()
			if err != nil {
				return err
			}
			return runBackupList(cmd.Context(), c, stdout, o.output, o.kube.namespace, cluster, env)
		},
	}
	o.kube.register(list, agentNamespace, "styrmin-system")
	addOutputFlag(list, &o.output, listOutputs()...)
	get := &cobra.Command{
		Use:   "get NAME",
		Short: "Show a backup: each deployment's artefact, size, times and sequence",
		Example: `  styrminctl backup get dev-20261201-0300
  styrminctl backup get before-migration -o yaml`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.kube.client()
			if err != nil {
				return err
			}
			var b v1alpha1.StyrminBackup
			if err := c.Get(cmd.Context(), client.ObjectKey{Namespace: o.kube.namespace, Name: args[0]}, &b); err != nil {
				return err
			}
			if o.output != outText {
				return writeData(stdout, o.output, &b)
			}
			fmt.Fprintf(stdout, "Backup:\t%s\nEnvironment:\t%s\nPhase:\t%s\nLocation:\t%s\n", b.Name, b.Spec.Environment, noneIfEmpty(string(b.Status.Phase)), noneIfEmpty(b.Status.Location))
			if b.Status.Message != "" {
				fmt.Fprintf(stdout, "Message:\t%s\n", b.Status.Message)
			}
			for _, s := range b.Status.Skipped {
				fmt.Fprintf(stdout, "Skipped:\t%s\n", s)
			}
			return printOperationDeployments(stdout, b.Status.Deployments)
		},
	}
	o.kube.register(get, agentNamespace, "styrmin-system")
	addOutputFlag(get, &o.output, outText, outJSON, outYAML)
	cmd.AddCommand(create, list, get)
	return cmd
}

// runBackupList lists the backups in the agent's namespace, oldest
// first: those of cluster/env, or all when env is "".
func runBackupList(ctx context.Context, c client.Reader, w io.Writer, output, namespace, cluster, env string) error {
	var bl v1alpha1.StyrminBackupList
	if err := c.List(ctx, &bl, client.InNamespace(namespace)); err != nil {
		return fmt.Errorf("listing StyrminBackups: %w", err)
	}
	t := table{header: []string{"NAME", "ENVIRONMENT", "PHASE", "DEPLOYMENTS", "SKIPPED", "STARTED", "MESSAGE"}, empty: "no backups"}
	items := bl.Items
	slices.SortFunc(items, func(a, b v1alpha1.StyrminBackup) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	for _, b := range items {
		// A backup with no cluster is of the agent's own, which only the
		// agent knows: it is listed for any cluster, as restore accepts it
		// for any (operation.NewRestore).
		if env != "" && (b.Spec.Environment != env || (b.Spec.Cluster != "" && b.Spec.Cluster != cluster)) {
			continue
		}
		var ds []string
		for _, d := range b.Status.Deployments {
			ds = append(ds, d.Name)
		}
		t.rows = append(t.rows, row{key: b.Name, name: b.Name, data: b, cells: []string{b.Name, b.Spec.Environment, noneIfEmpty(string(b.Status.Phase)),
			noneIfEmpty(strings.Join(ds, ",")), noneIfEmpty(skippedNames(b.Status.Skipped)), timeOrNone(timeOf(b.Status.StartedAt)), firstLine(b.Status.Message)}})
	}
	return t.print(w, output)
}

func (o *operationOptions) register(cmd *cobra.Command, making bool) {
	o.kube.register(cmd, agentNamespace, "styrmin-system")
	if making {
		cmd.Flags().StringSliceVar(&o.deployments, "deployment", nil, "only these deployments (repeat or comma-separate; default: all of the environment's)")
		cmd.Flags().StringVar(&o.name, "name", "", "the operation's name (default: ENV-[restore-]YYYYMMDD-HHMMSS)")
		cmd.Flags().BoolVar(&o.wait, "wait", false, "wait for the result; fail when it failed")
		cmd.Flags().DurationVar(&o.timeout, "timeout", 30*time.Minute, "how long --wait waits")
	}
}

// newRestoreCmd builds `styrminctl restore CLUSTER/ENV --from BACKUP` and
// `styrminctl restore retry NAME`.
func newRestoreCmd(load restConfigFunc, now func() time.Time, stdout io.Writer) *cobra.Command {
	o := &operationOptions{kube: newKubeOptions(load)}
	var from string
	cmd := &cobra.Command{
		Use:   "restore CLUSTER/ENV --from BACKUP",
		Short: "Restore an environment's deployments from a backup",
		Long: `restore makes a StyrminRestore: the agent runs each deployment's driver restore
hook as a task of that deployment. While it runs, and while it has failed until it
is retried or deleted, the deployment is "restore in progress": its other changes
(a configuration fan-out included) wait, and run after it succeeds. A restore is
refused, changing nothing, from a backup of another environment or driver, or of a
driver version the running one cannot read (another major version, or a newer one).` + kubeconfigHelp,
		Example: `  styrminctl restore local/dev --from dev-20261201-0300 --wait
  styrminctl restore local/dev --from before-migration --deployment hub
  styrminctl restore retry dev-restore-20261201-101500`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cluster, env, err := parseEnvironment(args[0])
			if err != nil {
				return err
			}
			if from == "" {
				return usageError{errors.New("--from BACKUP is required")}
			}
			if err := o.checkDeployments(cmd); err != nil {
				return err
			}
			if err := o.checkTimeout(); err != nil {
				return err
			}
			c, err := o.writer()
			if err != nil {
				return err
			}
			r, err := operation.NewRestore(cmd.Context(), c, operation.RestoreRequest{Namespace: o.kube.namespace, Cluster: cluster, Environment: env,
				Backup: from, Deployments: o.deployments, Name: o.name, Now: now()})
			if err != nil {
				return err
			}
			if err := c.Create(cmd.Context(), r); err != nil {
				return fmt.Errorf("creating StyrminRestore %s/%s: %w", r.Namespace, r.Name, err)
			}
			fmt.Fprintf(stdout, "restore %s of %s/%s from %s created\n", r.Name, cluster, env, from)
			if !o.wait {
				return nil
			}
			return waitOperation(cmd.Context(), c, r, o.timeout, func() (v1alpha1.OperationPhase, string, []v1alpha1.OperationDeployment) {
				return r.Status.Phase, r.Status.Message, r.Status.Deployments
			}, stdout)
		},
	}
	o.register(cmd, true)
	cmd.Flags().StringVar(&from, "from", "", "the backup to restore (a StyrminBackup's name)")
	retry := &cobra.Command{
		Use:     "retry NAME",
		Short:   "Run a failed restore's failed deployments again",
		Example: `  styrminctl restore retry dev-restore-20261201-101500`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := o.writer()
			if err != nil {
				return err
			}
			if err := operation.RetryRestore(cmd.Context(), c, client.ObjectKey{Namespace: o.kube.namespace, Name: args[0]}, now()); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "restore %s: retry requested\n", args[0])
			return nil
		},
	}
	o.kube.register(retry, agentNamespace, "styrmin-system")
	cmd.AddCommand(retry)
	return cmd
}

// waitOperation waits until an operation ends, prints its deployments,
// and fails when it failed.
func waitOperation(ctx context.Context, c client.Reader, obj client.Object, timeout time.Duration, status func() (v1alpha1.OperationPhase, string, []v1alpha1.OperationDeployment), w io.Writer) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := operation.Wait(ctx, c, obj, time.Second, func() bool { p, _, _ := status(); return p.Terminal() })
	phase, msg, ds := status()
	if err != nil {
		return fmt.Errorf("waiting for %s (phase %s): %w", obj.GetName(), noneIfEmpty(string(phase)), err)
	}
	if err := printOperationDeployments(w, ds); err != nil {
		return err
	}
	if phase != v1alpha1.OperationSucceeded {
		return fmt.Errorf("%s %s: %s", obj.GetName(), strings.ToLower(string(phase)), msg)
	}
	fmt.Fprintf(w, "%s succeeded\n", obj.GetName())
	return nil
}

func printOperationDeployments(w io.Writer, ds []v1alpha1.OperationDeployment) error {
	if len(ds) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "DEPLOYMENT\tPHASE\tSEQUENCE\tDRIVER\tARTEFACT\tSIZE\tSTARTED\tFINISHED\tMESSAGE")
	for _, d := range ds {
		size := "-"
		if d.Size > 0 {
			size = fmt.Sprint(d.Size)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s@%s\t%s\t%s\t%s\t%s\t%s\n", d.Name, noneIfEmpty(string(d.Phase)), d.Sequence, d.Driver.Name, d.Driver.Version,
			d.Artifact, size, timeOrNone(timeOf(d.StartedAt)), timeOrNone(timeOf(d.FinishedAt)), firstLine(d.Message))
	}
	return tw.Flush()
}

// skippedNames are the deployments a backup skipped, by name.
func skippedNames(skipped []string) string {
	names := make([]string, 0, len(skipped))
	for _, s := range skipped {
		name, _, _ := strings.Cut(s, ":")
		names = append(names, name)
	}
	return strings.Join(names, ",")
}

func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

func timeOrNone(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
