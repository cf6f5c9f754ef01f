package main

import (
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
	k := &kubeFlags{load: load}
	var output, namespace string
	var clientOnly bool
	cmd := &cobra.Command{
		Use:   "version [--client]",
		Short: "Show the version of styrminctl and of the cluster's agent",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if output != "text" && output != "json" {
				return fmt.Errorf("unknown output format %q (expected text or json)", output)
			}
			v := versions{Client: version.Get()}
			if !clientOnly {
				if err := readServerVersions(cmd, k, namespace, &v); err != nil {
					v.Error = err.Error()
				}
			}
			if err := printVersions(stdout, output, v, clientOnly); err != nil {
				return err
			}
			if v.Error != "" {
				return exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "text", "output format: text or json")
	cmd.Flags().BoolVar(&clientOnly, "client", false, "only this binary's version; do not read the cluster")
	cmd.Flags().StringVar(&namespace, "namespace", install.DefaultNamespace, "the agent's namespace")
	k.register(cmd)
	return cmd
}

func readServerVersions(cmd *cobra.Command, k *kubeFlags, namespace string, v *versions) error {
	cfg, err := k.config()
	if err != nil {
		return err
	}
	if v.Kubernetes, err = install.KubernetesVersion(cfg); err != nil {
		return err
	}
	a, err := install.Agent(cmd.Context(), cfg, namespace)
	if err != nil {
		return err
	}
	v.Agent = &a
	return nil
}

func printVersions(w io.Writer, output string, v versions, clientOnly bool) error {
	if output == "json" {
		return writeData(w, "json", v)
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
