package operator_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"helm.sh/helm/v4/pkg/action"
	release "helm.sh/helm/v4/pkg/release/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/internal/helmtest"
	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

const (
	webDeployment = "clusters/local/environments/dev/deployments/web.cue"
	webDriverSpec = "drivers/webapp/1.1.0/driver.cue"
	// sensitiveOld and sensitiveNew have characters URL encoding changes.
	sensitiveOld = "Old pass/w0rd+launch&code"
	sensitiveNew = "New pass/w0rd+launch&code"
)

// sensitiveWebRepo is the example repository with webapp's message
// parameter marked sensitive and also rendered into a Secret (base64, as
// charts put values in Secrets), and dev/web given the message value.
func sensitiveWebRepo(t *testing.T) fstest.MapFS {
	t.Helper()
	repo := exampleRepo(t)
	spec := string(repo[webDriverSpec].Data)
	marked := strings.Replace(spec, `message: *"Hello from Styrmin" | string & !=""`, `message: *"Hello from Styrmin" | string & !="" @styrmin(sensitive)`, 1)
	if marked == spec {
		t.Fatalf("%s: message parameter not found; update the test", webDriverSpec)
	}
	return fstest.MapFS{
		webDriverSpec: {Data: []byte(marked), Mode: 0o644},
		"drivers/webapp/1.1.0/chart/templates/secret.yaml": {Data: []byte(`apiVersion: v1
kind: Secret
metadata:
  name: {{ .Release.Name }}-message
data:
  message: {{ .Values.message | b64enc }}
  url: {{ printf "https://user:%s@example.com/" .Values.message | b64enc }}
`), Mode: 0o644},
		webDeployment: {Data: webConfig(sensitiveOld), Mode: 0o644},
	}
}

func webConfig(message string) []byte {
	return fmt.Appendf(nil, "driver:     \"webapp\"\nappVersion: \"1.25.0\"\nparameters: {replicas: 1, message: %q}\n", message)
}

// TestSensitiveValueNeverLeavesGitInAnyArtefact runs one deployment with a
// sensitive parameter on the local control plane, changes the value, and
// looks for both values, raw, upper-cased, base64 once, twice and
// unpadded, and URL-encoded, in every artefact the engine writes: the
// lockfiles, the StyrminDeployment and StyrminTasks, the events, the
// agent's log and the Helm release records (as helm reads them: manifest,
// values, chart). Only the objects the application reads hold the value,
// and they do hold it: the agent puts it there from git.
func TestSensitiveValueNeverLeavesGitInAnyArtefact(t *testing.T) {
	t.Parallel()
	e := startAgentEnvWith(t, sensitiveWebRepo(t))
	first := e.lock(t)["web"]
	if first == 0 {
		t.Fatal("the lock locked no instance of web")
	}
	agent := e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", first))
	e.requireLiveValue(t, sensitiveOld)

	// A new value is a change: a new sequence, applied.
	second := e.change(t, "web", "new password", map[string][]byte{webDeployment: webConfig(sensitiveNew)})
	if second <= first {
		t.Fatalf("a new sensitive value locked sequence %d after %d", second, first)
	}
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", second))
	e.requireLiveValue(t, sensitiveNew)

	ctx := context.Background()
	artefacts := map[string][]byte{}
	head, err := e.clone.Head()
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := e.clone.FS(head)
	if err != nil {
		t.Fatal(err)
	}
	lock, err := resolver.ReadLock(fsys, resolver.ID{Cluster: agentCluster, Environment: "dev", Name: "web"}.LockPath())
	if err != nil {
		t.Fatal(err)
	}
	lockBytes, err := resolver.EncodeLock(lock)
	if err != nil {
		t.Fatal(err)
	}
	artefacts["lockfile"] = lockBytes
	if !bytes.Contains(lockBytes, []byte(resolver.PlaceholderPrefix)) {
		t.Errorf("the lockfile holds no placeholder:\n%s", lockBytes)
	}
	artefacts["StyrminDeployment"] = mustYAML(t, e.deployment(t, webNamespace))
	for _, task := range e.tasksOf(t, webNamespace) {
		artefacts["StyrminTask "+task.Name] = mustYAML(t, task)
	}
	var events corev1.EventList
	if err := e.c.List(ctx, &events); err != nil {
		t.Fatal(err)
	}
	artefacts["events"] = mustYAML(t, events)
	artefacts["agent log"] = []byte(agent.Log())
	rels, err := action.NewHistory(helmtest.CLIConfig(t, e.cluster.KubeconfigPath, webNamespace)).Run("web")
	if err != nil {
		t.Fatalf("helm history: %v", err)
	}
	for _, r := range rels {
		rel := r.(*release.Release)
		b := mustYAML(t, map[string]any{"manifest": rel.Manifest, "config": rel.Config, "info": rel.Info, "chart": rel.Chart.Metadata})
		artefacts[fmt.Sprintf("release record web.v%d", rel.Version)] = b
		if !strings.Contains(rel.Manifest, resolver.PlaceholderPrefix) {
			t.Errorf("release record %d: the manifest holds no placeholder", rel.Version)
		}
	}
	if len(rels) < 2 {
		t.Errorf("%d release revisions, want one per value", len(rels))
	}
	for name, data := range artefacts {
		if found := secrettest.Find(data, sensitiveOld, sensitiveNew); len(found) > 0 {
			t.Errorf("%s holds %s", name, strings.Join(found, ", "))
		}
	}
}

// requireLiveValue checks that the objects web's application reads hold
// value: the ConfigMap as is, the Secret base64-encoded.
func (e *agentEnv) requireLiveValue(t *testing.T, value string) {
	t.Helper()
	ctx := context.Background()
	var cm corev1.ConfigMap
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: webNamespace, Name: "web-content"}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["message"] != value {
		t.Errorf("ConfigMap web-content message is %q, want the sensitive value", cm.Data["message"])
	}
	var sec corev1.Secret
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: webNamespace, Name: "web-message"}, &sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data["message"]) != value || string(sec.Data["url"]) != "https://user:"+value+"@example.com/" {
		t.Errorf("Secret web-message holds %q, %q; want the sensitive value in both", sec.Data["message"], sec.Data["url"])
	}
	var values corev1.Secret
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: webNamespace, Name: v1alpha1.SensitiveSecretName}, &values); err != nil {
		t.Errorf("the agent wrote no Secret %s: %v", v1alpha1.SensitiveSecretName, err)
	}
}

func mustYAML(t *testing.T, v any) []byte {
	t.Helper()
	b, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
