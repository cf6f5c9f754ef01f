package main

import (
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/install"
)

// newUninstallCmd builds `styrminctl uninstall`: Styrmin removed from a
// cluster, its applications left running as plain Helm releases.
func newUninstallCmd(load restConfigFunc, stdout io.Writer) *cobra.Command {
	k := newKubeOptions(load)
	var o install.UninstallOptions
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove Styrmin from a cluster, leaving the applications running as plain Helm releases",
		Long: "Remove Styrmin from a cluster without touching the applications it deployed:\n" +
			"  0. refuse, changing nothing, while a StyrminTask has not ended (Pending, Running): a\n" +
			"     task's stopComponents steps record in its status only the replicas they scaled\n" +
			"     the application down from, and deleting the task would leave it at 0. --force\n" +
			"     goes on and prints, for each such task, the workloads and replicas recorded;\n" +
			"  1. scale the agent to 0 and wait for its pods to end (it refuses to go on while an\n" +
			"     agent pod runs anywhere: an agent that saw its objects deleted would uninstall\n" +
			"     every application);\n" +
			"  2. remove the agent's finalizers (styrmin.io/release on StyrminDeployments,\n" +
			"     styrmin.io/operation-tasks on StyrminBackups and StyrminRestores), so that no\n" +
			"     namespace waits for the agent, and delete every Styrmin object;\n" +
			"  3. delete the CRDs (not with --keep-crds);\n" +
			"  4. delete what install created: the admission policy, RBAC, the agent's Service and\n" +
			"     Deployment and its namespace (not with --keep-namespace; the namespace takes the\n" +
			"     credentials Secrets made in it along).\n" +
			"The applications' objects and Helm release Secrets stay: helm list -A shows them and\n" +
			"helm uninstall removes one; nothing corrects their drift any more. One line per thing\n" +
			"done; what is already gone is skipped, so it is safe to run again. Works the same on\n" +
			"an agent installed with kustomize or the Helm chart (the objects have the same names)." +
			kubeconfigHelp,
		Example: `  styrminctl uninstall --context prod
  styrminctl uninstall --keep-crds --keep-namespace`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := k.config()
			if err != nil {
				return err
			}
			o.Namespace = k.namespace
			return install.Uninstall(cmd.Context(), cfg, stdout, o)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.KeepCRDs, "keep-crds", false, "leave the styrmin.io CRDs (the Styrmin objects are deleted all the same)")
	f.BoolVar(&o.Force, "force", false, "go on while StyrminTasks have not ended, printing the replicas each recorded for the workloads it stopped (they may stay at 0: scale them back by hand)")
	f.BoolVar(&o.KeepNamespace, "keep-namespace", false, "leave the agent's namespace and the Secrets in it (install's objects there are deleted)")
	f.DurationVar(&o.Timeout, "timeout", 2*time.Minute, "how long to wait for the agent's pods to end, and for the Styrmin objects and CRDs to go")
	k.register(cmd, agentNamespace, install.DefaultNamespace)
	return cmd
}
