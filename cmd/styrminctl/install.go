package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/install"
	"github.com/styrmin/styrmin/version"
)

// newInstallCmd builds `styrminctl install`: Styrmin's CRDs, namespace,
// RBAC, admission policy and agent, set up for one cluster and
// repository, applied or printed.
func newInstallCmd(load restConfigFunc, stdout io.Writer) *cobra.Command {
	k := newKubeOptions(load)
	var o install.Options
	var export bool
	var clusterWide, allowDowngrade bool
	cmd := &cobra.Command{
		Use:   "install --cluster NAME --repo URL",
		Short: "Install or upgrade Styrmin's CRDs and agent on a cluster (or print them with --export)",
		Long: "Render Styrmin's CRDs, the agent's namespace, RBAC, admission policy and Deployment\n" +
			"with the cluster's name, the repository, branch, folder, credentials Secret and\n" +
			"image set in the agent's arguments, and apply them with server-side apply\n" +
			"(field manager " + install.FieldManager + "): the CRDs first, established before the rest.\n" +
			"A CRD that would drop a version the cluster still stores is refused and nothing\n" +
			"is applied. Prints one line per object: created, configured or unchanged.\n" +
			"With --export, print the YAML and change nothing (the installed agent is not read).\n\n" +
			"Over an installed agent (an upgrade), install first reads it and keeps what the\n" +
			"command line does not set: its image (unless this styrminctl is a newer release,\n" +
			"whose image it installs; an image by digest, or by a tag other than its version,\n" +
			"is kept), its --branch, --path and --repo-secret (an agent without --branch or\n" +
			"--repo-secret stays without them), the choice of\n" +
			"--default-environment-cluster-wide, and every agent argument install does not\n" +
			"manage (--lock-mode, --lock-secret, --ui-bind-address, --report-statuses, …), and\n" +
			"every Secret Role styrmin-agent-secrets grants (an environment's backup credentials).\n" +
			"That Role grants each Secret the agent's arguments name (--repo-secret, --lock-secret,\n" +
			"--status-secret, --webhook-secret-name) and those of --extra-secret-names.\n" +
			"It prints what it keeps and which agent arguments change. It refuses, applying\n" +
			"nothing, when the agent or a CRD was installed by a newer Styrmin than this\n" +
			"styrminctl (or this build has no release version to tell): --allow-downgrade.\n\n" +
			"The credentials Secret is not created: kubectl -n NAMESPACE create secret generic\n" +
			"SECRET --from-literal=token=… (https) or --from-file=identity=… --from-file=known_hosts=… (ssh)." +
			kubeconfigHelp,
		Example: `  styrminctl install --cluster prod --repo https://git.example.com/platform/desired-state.git
  styrminctl install --cluster prod --repo ssh://git@git.example.com/platform/mono.git --path deploy --context prod
  styrminctl install --cluster prod --repo https://git.example.com/platform/desired-state.git --export > styrmin.yaml
  styrminctl install --cluster prod --repo https://git.example.com/platform/desired-state.git --default-environment-cluster-wide=false`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Namespace = k.namespace
			o.WithoutDefaultEnvironmentBinding = !clusterWide
			// The values given are checked before the installed agent is
			// read: a bad one is a usage error, and nothing is asked,
			// rendered or applied. Render checks them again with what an
			// upgrade keeps of the installed agent.
			if err := install.CheckValues(o); err != nil {
				return usageError{err}
			}
			if export {
				if o.Image == "" {
					o.Image = install.DefaultImage(version.Get())
				}
				objs, err := install.Render(o)
				if err != nil {
					return err
				}
				return install.Export(stdout, objs)
			}
			cfg, err := k.config()
			if err != nil {
				return err
			}
			live, err := install.Inspect(cmd.Context(), cfg, o.Namespace)
			if err != nil {
				return err
			}
			up, err := install.PlanUpgrade(o, live, install.UpgradeOptions{AllowDowngrade: allowDowngrade, Given: cmd.Flags().Changed})
			if err != nil {
				return err
			}
			o = up.Options
			if o.Image == "" {
				o.Image = install.DefaultImage(version.Get())
			}
			objs, err := install.Render(o)
			if err != nil {
				return err
			}
			for _, n := range up.Notes {
				fmt.Fprintln(stdout, n)
			}
			applied, err := install.Apply(cmd.Context(), cfg, objs, install.ApplyOptions{})
			for _, a := range applied {
				fmt.Fprintf(stdout, "%s %s\n", a.Object, a.Action)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "installed the agent for cluster %s with image %s; run styrminctl check\n", o.Cluster, o.Image)
			if o.WithoutDefaultEnvironmentBinding {
				fmt.Fprintf(stdout, "left out ClusterRoleBinding styrmin-agent-default-environment: bind ClusterRole styrmin-agent-default-environment with RoleBindings where the default environment acts (docs/tenancy.md)\n")
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Cluster, "cluster", "", "name of the cluster whose locks the agent applies (locks/<cluster>/…); required")
	f.StringVar(&o.Repo, "repo", "", "URL of the desired-state repository, without credentials; required")
	f.StringVar(&o.Branch, "branch", install.DefaultBranch, "branch the agent follows (default on an upgrade: the installed agent's)")
	f.StringVar(&o.Path, "path", "", "folder of the git repository that holds the desired-state repository (default: its root; on an upgrade the installed agent's)")
	f.StringVar(&o.SecretName, "secret-name", install.DefaultSecretName, "Secret in --namespace holding the repository's credentials (default on an upgrade: the installed agent's)")
	f.StringVar(&o.Image, "image", "", "the agent's image (default: the installed agent's, unless this styrminctl is a newer release; on a first install "+install.ImageRepository+":<this styrminctl's version>, or for a build without a release version the one the shipped manifests name)")
	f.BoolVar(&clusterWide, "default-environment-cluster-wide", true, "bind ClusterRole styrmin-agent-default-environment (what the agent may change for environments without a service account) in every namespace; false for strict tenancy: the ClusterRoleBinding is left out on every install and upgrade, and you bind the role with RoleBindings (docs/tenancy.md; the chart's rbac.defaultEnvironmentClusterWide)")
	f.StringSliceVar(&o.ExtraSecretNames, "extra-secret-names", nil, "other Secrets of --namespace the agent may read, besides those its arguments name: the credentials Secrets environments name for their backups (the chart's rbac.extraSecretNames); on an upgrade added to those Role styrmin-agent-secrets grants already, which stay")
	f.BoolVar(&export, "export", false, "print the manifests as YAML and change nothing")
	f.BoolVar(&allowDowngrade, "allow-downgrade", false, "install even when the agent or the CRDs were installed by a newer Styrmin than this styrminctl (or by a release, when this build has none): the older CRDs and agent replace them")
	k.register(cmd, agentNamespace, install.DefaultNamespace)
	return cmd
}

// newCheckCmd builds `styrminctl check [--pre]`: one line per check, a
// non-zero exit when one fails. getenv reads STYRMIN_GIT_TOKEN.
func newCheckCmd(load restConfigFunc, getenv func(string) string, stdout io.Writer) *cobra.Command {
	k := newKubeOptions(load)
	var o install.CheckOptions
	cmd := &cobra.Command{
		Use:   "check [--pre]",
		Short: "Check the prerequisites (--pre) or an installation of Styrmin on a cluster",
		Long: "Check the API server's version (at least " + install.MinKubernetes + "); with --pre only that and, with\n" +
			"--repo, the repository. Otherwise also the CRDs (established, at the versions this\n" +
			"styrminctl expects), the RBAC objects and admission policy, the agent's Deployment\n" +
			"(ready replicas), its StyrminSource (Ready, last fetch) and the repository, reached\n" +
			"with the token in $STYRMIN_GIT_TOKEN or else the Secret the agent uses (ls-remote of\n" +
			"the branch head; --repo and --branch default to the agent's). One line per check;\n" +
			"the exit code is 1 when any fails." + kubeconfigHelp,
		Example: `  styrminctl check --pre --repo https://git.example.com/platform/desired-state.git
  styrminctl check --context prod
  styrminctl check -n styrmin-system --kubeconfig ./prod.kubeconfig`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := k.config()
			if err != nil {
				return err
			}
			o.Namespace = k.namespace
			o.Token = getenv("STYRMIN_GIT_TOKEN")
			findings := install.Check(cmd.Context(), cfg, o)
			for _, f := range findings {
				mark := "✔"
				if !f.OK {
					mark = "✗"
				}
				fmt.Fprintf(stdout, "%s %s\n", mark, f.Message)
			}
			if install.Failed(findings) {
				return exitError{code: 1}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&o.Pre, "pre", false, "check only the prerequisites of an installation")
	f.StringVar(&o.Repo, "repo", "", "URL of the repository to reach (default: the agent's --repo)")
	f.StringVar(&o.Branch, "branch", "", "branch to look for (default: the agent's --branch, else the remote's HEAD)")
	k.register(cmd, agentNamespace, install.DefaultNamespace)
	return cmd
}
