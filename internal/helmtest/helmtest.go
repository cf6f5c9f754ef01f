// Package helmtest reads releases the way the helm CLI does, for tests
// that check that what the agent records is what `helm` shows.
package helmtest

import (
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"k8s.io/cli-runtime/pkg/genericclioptions"
)

// CLIConfig is an independent Helm SDK configuration of a namespace,
// built from a kubeconfig file as the helm CLI builds it: what it reads of
// a release is what `helm` would show.
func CLIConfig(t testing.TB, kubeconfig, ns string) *action.Configuration {
	t.Helper()
	flags := genericclioptions.NewConfigFlags(false)
	flags.KubeConfig = &kubeconfig
	flags.Namespace = &ns
	cfg := action.NewConfiguration()
	if err := cfg.Init(flags, ns, "secret"); err != nil {
		t.Fatal(err)
	}
	return cfg
}
