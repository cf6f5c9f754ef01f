package operator_test

import (
	"context"
	"encoding/json"
	"os"
	"testing"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

func TestZZDumpObjects(t *testing.T) {
	e := startAgentEnv(t)
	e.lock(t)
	e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", 1))
	seq := e.change(t, "web", "web: msg", map[string][]byte{"clusters/local/environments/dev/deployments/web.cue": []byte(os.Getenv("WEBCUE"))})
	task := e.waitTask(t, webNamespace, "web", seq)
	requireSucceeded(t, task)
	var sd v1alpha1.StyrminDeployment
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: webNamespace, Name: webNamespace}, &sd); err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(&sd)
	b, _ := json.Marshal(task)
	os.WriteFile("/tmp/sd.json", a, 0o644)
	os.WriteFile("/tmp/task.json", b, 0o644)
}
