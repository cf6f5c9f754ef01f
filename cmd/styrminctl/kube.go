package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator"
)

// restConfigFunc turns kubectl's flags into the REST config of a
// cluster. The commands that talk to a cluster take one, so tests hand
// them a test cluster's.
type restConfigFunc func(genericclioptions.RESTClientGetter) (*rest.Config, error)

// kubeRESTConfig is the restConfigFunc of the real command: kubectl's
// loading rules (--kubeconfig, else $KUBECONFIG, then ~/.kube/config)
// with the other flags over them.
func kubeRESTConfig(g genericclioptions.RESTClientGetter) (*rest.Config, error) {
	cfg, err := g.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubernetes config: %w", err)
	}
	return cfg, nil
}

// namespaceUse says what -n/--namespace means for a command.
type namespaceUse int

const (
	// noNamespace: the command has no -n.
	noNamespace namespaceUse = iota
	// filterNamespace: -n keeps one namespace, -A (the default) all.
	filterNamespace
	// agentNamespace: -n is the agent's namespace (default
	// styrmin-system).
	agentNamespace
)

// kubeOptions are kubectl's flags (k8s.io/cli-runtime's ConfigFlags:
// --kubeconfig, --context, --user, --server, --token,
// --certificate-authority, --insecure-skip-tls-verify, --request-timeout
// and the rest) and -n/--namespace, the same on every command that talks
// to a cluster. ConfigFlags' --cluster is not registered: install's
// --cluster is the Styrmin cluster's name.
type kubeOptions struct {
	flags *genericclioptions.ConfigFlags
	load  restConfigFunc
	// namespace is -n; allNamespaces is -A.
	namespace     string
	allNamespaces bool
}

func newKubeOptions(load restConfigFunc) *kubeOptions {
	f := genericclioptions.NewConfigFlags(false)
	f.ClusterName = nil // Styrmin's own --cluster (install) names the Styrmin cluster
	f.Namespace = nil   // registered by register, with the command's meaning
	f.CacheDir = nil    // no discovery cache: the commands use no discovery
	return &kubeOptions{flags: f, load: load}
}

// register adds the flags to cmd; ns says what -n means there and
// defaultNS is its default for agentNamespace.
func (k *kubeOptions) register(cmd *cobra.Command, ns namespaceUse, defaultNS string) {
	k.flags.AddFlags(cmd.Flags())
	switch ns {
	case filterNamespace:
		cmd.Flags().StringVarP(&k.namespace, "namespace", "n", "", "only this namespace (default: all namespaces)")
		cmd.Flags().BoolVarP(&k.allNamespaces, "all-namespaces", "A", false, "every namespace (the default; kubeconfig's namespace is not used)")
	case agentNamespace:
		cmd.Flags().StringVarP(&k.namespace, "namespace", "n", defaultNS, "the agent's namespace")
	}
}

// config is the REST config the flags name.
func (k *kubeOptions) config() (*rest.Config, error) {
	if k.allNamespaces && k.namespace != "" {
		return nil, usageError{errors.New("-n/--namespace and -A/--all-namespaces: give one of them")}
	}
	return k.load(k.flags)
}

// client is a client of Styrmin's scheme for the cluster the flags name.
func (k *kubeOptions) client() (client.Reader, error) { return k.writer() }

// writer is client for the commands that write (backup, restore).
func (k *kubeOptions) writer() (client.Client, error) {
	cfg, err := k.config()
	if err != nil {
		return nil, err
	}
	scheme, err := operator.NewScheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, nil
}

// kubeconfigHelp is the note on kubectl's flags in the help of every
// cluster command.
const kubeconfigHelp = "\n\nThe cluster is chosen as kubectl does (--kubeconfig, --context, --server, --token, …);\n" +
	"kubectl's --cluster flag is not offered: styrminctl's --cluster names a Styrmin cluster."
