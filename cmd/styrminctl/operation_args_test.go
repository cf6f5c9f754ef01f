package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// errClusterAsked is what the load of these tests returns: reaching it
// means the command went on to the cluster.
var errClusterAsked = errors.New("the cluster was asked")

// runAskingNoCluster runs the command build makes with args and a load
// that stops at the cluster; it says whether the cluster was asked.
func runAskingNoCluster(t *testing.T, build func(restConfigFunc, *bytes.Buffer) *cobra.Command, args ...string) (asked bool, out string, err error) {
	t.Helper()
	load := func(genericclioptions.RESTClientGetter) (*rest.Config, error) {
		asked = true
		return nil, errClusterAsked
	}
	var stdout bytes.Buffer
	cmd := build(load, &stdout)
	cmd.SilenceErrors, cmd.SilenceUsage = true, true
	cmd.SetOut(&bytes.Buffer{})
	cmd.SetErr(&bytes.Buffer{})
	cmd.SetArgs(args)
	err = cmd.ExecuteContext(context.Background())
	return asked, stdout.String(), err
}

// TestDeploymentFlagNamingNoDeploymentIsRefusedBeforeTheClusterIsAsked
// pins that an explicit --deployment of backup create and restore names
// deployments: pflag turns --deployment "" (and --deployment=) into the
// empty list, which the agent reads as every deployment of the
// environment, and "hub," into a name "" the agent refuses only after
// the object is made. Each is a usage error naming the flag, given
// before the cluster is asked, so no StyrminBackup or StyrminRestore is
// made; names that are deployment names still reach the cluster.
func TestDeploymentFlagNamingNoDeploymentIsRefusedBeforeTheClusterIsAsked(t *testing.T) {
	t.Parallel()
	now := func() time.Time { return time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC) }
	commands := []struct {
		name  string
		build func(restConfigFunc, *bytes.Buffer) *cobra.Command
		args  []string
	}{
		{"backup create", func(l restConfigFunc, w *bytes.Buffer) *cobra.Command { return newBackupCmd(l, now, w) }, []string{"create", "local/prod"}},
		{"restore", func(l restConfigFunc, w *bytes.Buffer) *cobra.Command { return newRestoreCmd(l, now, w) }, []string{"local/prod", "--from", "nightly"}},
	}
	for _, c := range commands {
		for _, flag := range [][]string{
			{"--deployment", ""},
			{"--deployment="},
			{"--deployment", "hub,"},
			{"--deployment", ","},
			{"--deployment", "Hub"},
			{"--deployment", "hub_web"},
			{"--deployment", strings.Repeat("h", 41)},
		} {
			t.Run(c.name+" "+strings.Join(flag, " "), func(t *testing.T) {
				asked, out, err := runAskingNoCluster(t, c.build, append(append([]string{}, c.args...), flag...)...)
				if asked {
					t.Fatalf("the cluster was asked (err %v, output %q): the command went on to make the object", err, out)
				}
				var usage usageError
				if !errors.As(err, &usage) || !strings.HasPrefix(err.Error(), "--deployment ") || !strings.Contains(err.Error(), "expected deployment names") {
					t.Errorf("error %v, want a usage error naming --deployment and what it expects", err)
				}
				if out != "" {
					t.Errorf("printed %q for a refused command", out)
				}
			})
		}
		for _, flag := range [][]string{nil, {"--deployment", "hub"}, {"--deployment", "hub,web"}, {"--deployment", "hub", "--deployment", "web"}} {
			t.Run(c.name+" "+strings.Join(flag, " ")+" reaches the cluster", func(t *testing.T) {
				asked, _, err := runAskingNoCluster(t, c.build, append(append([]string{}, c.args...), flag...)...)
				if !asked || !errors.Is(err, errClusterAsked) {
					t.Errorf("asked %v, error %v: deployment names (or none) must reach the cluster", asked, err)
				}
			})
		}
	}
}

// TestBackupListKeepsTheBackupsOfTheEnvironmentOfTheClusterNamed pins
// that `backup list CLUSTER/ENV` filters on the cluster as well as the
// environment: dev of cluster other is not dev of local. A backup that
// records no cluster is of the agent's own, which the command cannot
// tell, so it is listed as restore would accept it.
func TestBackupListKeepsTheBackupsOfTheEnvironmentOfTheClusterNamed(t *testing.T) {
	t.Parallel()
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	backup := func(name, cluster, env string, minute int) client.Object {
		return &v1alpha1.StyrminBackup{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "styrmin-system", CreationTimestamp: *at(minute)},
			Spec:       v1alpha1.StyrminBackupSpec{Cluster: cluster, Environment: env},
		}
	}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(
		backup("local-dev", "local", "dev", 1),
		backup("other-dev", "other", "dev", 2),
		backup("agents-dev", "", "dev", 3),
		backup("local-staging", "local", "staging", 4),
	).Build()
	for _, tc := range []struct{ cluster, env, want string }{
		{"local", "dev", "local-dev agents-dev"},
		{"other", "dev", "other-dev agents-dev"},
		{"local", "staging", "local-staging"},
		{"", "", "local-dev other-dev agents-dev local-staging"},
	} {
		var out bytes.Buffer
		if err := runBackupList(context.Background(), cl, &out, outName, "styrmin-system", tc.cluster, tc.env); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(strings.Fields(out.String()), " "); got != tc.want {
			t.Errorf("backup list %s/%s: %s, want %s", tc.cluster, tc.env, got, tc.want)
		}
	}
}

// TestBackupListChecksItsArgumentBeforeAskingTheCluster pins that a
// malformed CLUSTER/ENV is refused without contacting the cluster.
func TestBackupListChecksItsArgumentBeforeAskingTheCluster(t *testing.T) {
	t.Parallel()
	build := func(l restConfigFunc, w *bytes.Buffer) *cobra.Command {
		return newBackupCmd(l, time.Now, w)
	}
	for _, arg := range []string{"dev", "local/", "local/dev/hub"} {
		asked, _, err := runAskingNoCluster(t, build, "list", arg)
		var usage usageError
		if asked || !errors.As(err, &usage) || !strings.Contains(err.Error(), "expected CLUSTER/ENVIRONMENT") {
			t.Errorf("backup list %q: asked the cluster %v, error %v; want a usage error before any request", arg, asked, err)
		}
	}
	if asked, _, err := runAskingNoCluster(t, build, "list", "local/dev"); !asked || !errors.Is(err, errClusterAsked) {
		t.Errorf("backup list local/dev: asked %v, error %v: a well-formed argument must reach the cluster", asked, err)
	}
}

// TestEnvCloneChecksTheBackupIDBeforeAskingTheCluster pins that a
// --from-backup that is no backup ID (nor "latest") is a usage error
// naming the flag, given before the cluster is asked for the backup's
// record and before anything is written; an explicit empty one too,
// rather than a clone with no backup. A valid ID still asks the cluster.
func TestEnvCloneChecksTheBackupIDBeforeAskingTheCluster(t *testing.T) {
	t.Parallel()
	repo := exampleRepo(t)
	build := func(l restConfigFunc, w *bytes.Buffer) *cobra.Command {
		return newEnvCmd(&globalOptions{Repo: repo}, l, w)
	}
	for _, id := range []string{"Bad_ID", "", "nightly.1", strings.Repeat("n", 64)} {
		asked, out, err := runAskingNoCluster(t, build, "clone", "local/dev", "preview", "--from-backup", id)
		var usage usageError
		if asked || !errors.As(err, &usage) || !strings.Contains(err.Error(), "--from-backup ") || !strings.Contains(err.Error(), "expected a backup ID") {
			t.Errorf("--from-backup %q: asked the cluster %v, error %v; want a usage error naming the flag before any request", id, asked, err)
		}
		if out != "" {
			t.Errorf("--from-backup %q: printed %q for a refused clone", id, out)
		}
		if _, err := os.Stat(filepath.Join(repo, "clusters/local/environments/preview")); !os.IsNotExist(err) {
			t.Fatalf("--from-backup %q: the refused clone wrote its folder: %v", id, err)
		}
	}
	for _, id := range []string{"nightly", "latest"} {
		if asked, _, err := runAskingNoCluster(t, build, "clone", "local/dev", "preview", "--from-backup", id); !asked {
			t.Errorf("--from-backup %s: the cluster was not asked (error %v)", id, err)
		}
	}
}
