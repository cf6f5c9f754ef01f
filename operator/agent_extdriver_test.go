package operator_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/examples"
)

// TestAgentRunsAnExternalDriverAtItsLockedCommit locks, with the CLI, web
// on webapp 1.1.0 kept in a second repository served over HTTP, and hub
// on graphhub kept in the repository. Before the agent starts, the driver
// repository's branch moves on (a chart that differs) and a later commit
// deletes drivers/graphhub: the agent still runs both tasks, fetching the
// driver repository at the commit the lock recorded, with the
// repository's credentials, and reading graphhub at the lock commit.
func TestAgentRunsAnExternalDriverAtItsLockedCommit(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)

	// The driver repository: webapp 1.1.0 under webapp/1.1.0/.
	webapp := driverFiles(t, "drivers/webapp/1.1.0", "webapp/1.1.0/")
	e.git.Commit("drivers", "webapp 1.1.0", webapp)
	locked := e.git.Head("drivers", "main")

	// The desired-state repository takes it from there.
	change := map[string][]byte{
		"styrmin.cue": []byte("deletionThreshold: 1\ndrivers: [{name: \"webapp\", version: \"1.1.0\", url: \"" +
			e.git.RepoURL("drivers") + "\", ref: \"main\", path: \"webapp/1.1.0\"}]\n"),
		"clusters/local/environments/dev/deployments/web.cue": []byte("driver: {name: \"webapp\", version: \"1.1.0\"}\nappVersion: \"1.25.0\"\nparameters: replicas: 2\n"),
	}
	for p := range driverFiles(t, "drivers/webapp/1.1.0", "drivers/webapp/1.1.0/") {
		change[p] = nil
	}
	e.commitConfig(t, "webapp 1.1.0 from its own repository", change)
	out := e.ctl(t, "lock", "--push")
	if !strings.Contains(out, "web") || !strings.Contains(out, "hub") {
		t.Fatalf("lock --push locked:\n%s", out)
	}

	// Afterwards: the driver's branch moves on, and the head drops the
	// in-repository driver.
	moved := map[string][]byte{"webapp/1.1.0/chart/templates/configmap.yaml": append(webapp["webapp/1.1.0/chart/templates/configmap.yaml"], []byte("  moved: \"on\"\n")...)}
	e.git.Commit("drivers", "webapp: a change after the lock", moved)
	drop := map[string][]byte{}
	for p := range driverFiles(t, "drivers/graphhub", "drivers/graphhub/") {
		drop[p] = nil
	}
	e.commitConfig(t, "drop graphhub", drop)

	e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", 1))
	requireSucceeded(t, e.waitTask(t, hubNamespace, "hub", 1))

	sd := e.deployment(t, webNamespace)
	if s := sd.Spec.DriverSource; s == nil || s.Commit != locked || s.URL != e.git.RepoURL("drivers") || s.Path != "webapp/1.1.0" {
		t.Fatalf("web's StyrminDeployment driver source = %+v, want commit %s", s, locked)
	}
	var cms corev1.ConfigMapList
	if err := e.c.List(context.Background(), &cms, client.InNamespace(webNamespace)); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cm := range cms.Items {
		if _, ok := cm.Data["message"]; ok {
			found = true
			if _, ok := cm.Data["moved"]; ok {
				t.Fatalf("ConfigMap %s was rendered with the driver branch's newer commit", cm.Name)
			}
		}
	}
	if !found {
		t.Fatal("web's ConfigMap was not applied")
	}
}

// driverFiles returns the files of the example's folder dir, keyed by
// prefix + their path below dir.
func driverFiles(t *testing.T, dir, prefix string) map[string][]byte {
	t.Helper()
	sub, err := fs.Sub(examples.Repo(), dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	err = fs.WalkDir(sub, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(sub, p)
		out[prefix+p] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
