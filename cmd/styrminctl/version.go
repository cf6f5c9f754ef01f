package main

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/install"
	"github.com/styrmin/styrmin/version"
)

// versions is what `styrminctl version` prints.
type versions struct {
	Client     version.Info       `json:"client"`
	Kubernetes string             `json:"kubernetes,omitempty"`
	Agent      *install.AgentInfo `json:"agent,omitempty"`
	// Error says why the cluster's part is missing.
	Error string `json:"error,omitempty"`
}

// newVersionCmd builds `styrminctl version`: this binary's version and,
// unless --client, the Kubernetes version and the agent's (its image and
// the version of the styrminctl that installed it). Like kubectl, the
// exit code is 1 when the cluster's part cannot be read.
func newVersionCmd(load restConfigFunc, stdout io.Writer) *cobra.Command {
	o := &versionOptions{kube: newKubeOptions(load)}
	cmd := &cobra.Command{
		Use:   "version [--client]",
		Short: "Show the version of styrminctl and of the cluster's agent",
		Long: "Show this binary's version and, unless --client, the Kubernetes version and the\n" +
			"agent's (from its Deployment in -n, default " + install.DefaultNamespace + "). The exit code is 1 when the\n" +
			"cluster cannot be read, as kubectl's." + kubeconfigHelp,
		Example: `  styrminctl version
  styrminctl version --client -o json
  styrminctl version --context prod -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			v := versions{Client: version.Get()}
			if !o.clientOnly {
				if err := o.readServer(cmd.Context(), &v); err != nil {
					v.Error = err.Error()
				}
			}
			if err := printVersions(stdout, o.output, v, o.clientOnly); err != nil {
				return err
			}
			if v.Error != "" {
				return exitError{code: 1}
			}
			return nil
		},
	}
	addOutputFlag(cmd, &o.output, dataOutputs()...)
	cmd.Flags().BoolVar(&o.clientOnly, "client", false, "only this binary's version; do not read the cluster")
	o.kube.register(cmd, agentNamespace, install.DefaultNamespace)
	return cmd
}

// versionOptions are the flags of `version`.
type versionOptions struct {
	kube       *kubeOptions
	output     string
	clientOnly bool
}

// readServer reads the Kubernetes and the agent's versions into v.
func (o *versionOptions) readServer(ctx context.Context, v *versions) error {
	cfg, err := o.kube.config()
	if err != nil {
		return err
	}
	if v.Kubernetes, err = install.KubernetesVersion(cfg); err != nil {
		return err
	}
	a, err := install.Agent(ctx, cfg, o.kube.namespace)
	if err != nil {
		return err
	}
	v.Agent = &a
	return nil
}

func printVersions(w io.Writer, output string, v versions, clientOnly bool) error {
	if output != outText {
		return writeData(w, output, v)
	}
	fmt.Fprintf(w, "client: %s\n", v.Client)
	if clientOnly {
		return nil
	}
	if v.Kubernetes != "" {
		fmt.Fprintf(w, "kubernetes: %s\n", v.Kubernetes)
	}
	switch {
	case v.Agent != nil:
		installed := v.Agent.Version
		if installed == "" {
			installed = v.Agent.Tag
		}
		if installed == "" {
			installed = "unknown"
		}
		fmt.Fprintf(w, "agent: %s (image %s, %d/%d replicas ready, Deployment %s)\n",
			installed, v.Agent.Image, v.Agent.ReadyReplicas, v.Agent.Replicas, v.Agent.Deployment)
	case v.Error != "":
		fmt.Fprintf(w, "agent: unknown: %s\n", v.Error)
	}
	return nil
}
