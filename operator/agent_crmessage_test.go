package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// databaseKind is a CRD standing for a database operator's (a
// CloudNativePG Cluster) and the agent's right to apply and read it.
var databaseKind = [][]byte{[]byte(`apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: databases.db.example.com}
spec:
  group: db.example.com
  scope: Namespaced
  names: {plural: databases, singular: database, kind: Database, listKind: DatabaseList}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema:
        type: object
        x-kubernetes-preserve-unknown-fields: true
`), []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: test-databases}
rules: [{apiGroups: [db.example.com], resources: [databases], verbs: ["*"]}]
`), []byte(`apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: test-databases}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: test-databases}
subjects: [{kind: ServiceAccount, name: ` + config.AgentServiceAccount + `, namespace: ` + config.AgentNamespace + `}]
`)}

// TestACustomResourcesMessageOnTheDeploymentShowsNoSensitiveValue runs web
// with its sensitive message and a Database its chart holds on the local
// control plane. The database's operator (the test) says Ready=False
// quoting the connection string it could not use, password and all: the
// StyrminDeployment's components and Ready message (the web UI, anyone
// who may read StyrminDeployments) say why, with the value masked; no
// form of it is in the object.
func TestACustomResourcesMessageOnTheDeploymentShowsNoSensitiveValue(t *testing.T) {
	t.Parallel()
	repo := sensitiveWebRepo(t)
	repo["drivers/webapp/1.1.0/chart/templates/database.yaml"] = &fstest.MapFile{Data: []byte(`apiVersion: db.example.com/v1
kind: Database
metadata:
  name: {{ .Release.Name }}-db
spec:
  instances: 1
`), Mode: 0o644}
	e := startAgentEnvWith(t, repo)
	agenttest.Apply(t, e.c, "test", databaseKind)
	db := &unstructured.Unstructured{}
	db.SetAPIVersion("db.example.com/v1")
	db.SetKind("Database")
	agenttest.WaitUntil(t, 30*time.Second, "Databases to be served", func(ctx context.Context) (bool, string, error) {
		list := &unstructured.UnstructuredList{}
		list.SetAPIVersion("db.example.com/v1")
		list.SetKind("DatabaseList")
		err := e.c.List(ctx, list)
		return err == nil, fmt.Sprint(err), nil
	})
	first := e.lock(t)["web"]
	// Reconciled every few seconds: the agent does not watch Databases.
	e.startAgent(t, "--drift-interval=2s")
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", first))

	ctx := context.Background()
	if err := e.c.Get(ctx, client.ObjectKey{Namespace: webNamespace, Name: "web-db"}, db); err != nil {
		t.Fatal(err)
	}
	refused := "connection to postgres://app:" + sensitiveOld + "@db:5432/app failed: password authentication failed"
	db.Object["status"] = map[string]any{"conditions": []any{map[string]any{"type": "Ready", "status": "False",
		"reason": "ConnectionFailed", "message": refused, "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}}}
	if err := e.c.Status().Update(ctx, db); err != nil {
		t.Fatal(err)
	}

	var sd *v1alpha1.StyrminDeployment
	var ready string
	agenttest.WaitUntil(t, 60*time.Second, "web's Ready condition to name the Database", func(context.Context) (bool, string, error) {
		sd = e.deployment(t, webNamespace)
		if c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady); c != nil {
			ready = c.Message
		}
		return strings.Contains(ready, "Database/web-db"), ready, nil
	})
	if found := secrettest.Find(mustYAML(t, sd), sensitiveOld); len(found) > 0 {
		t.Errorf("the StyrminDeployment holds %s; Ready: %s", strings.Join(found, ", "), ready)
	}
	want := "Database/web-db: connection to postgres://app:" + resolver.Masked + "@db:5432/app failed"
	if !strings.Contains(ready, want) {
		t.Errorf("Ready message %q does not say %q", ready, want)
	}
	var events corev1.EventList
	if err := e.c.List(ctx, &events, client.InNamespace(webNamespace)); err != nil {
		t.Fatal(err)
	}
	if found := secrettest.Find(mustYAML(t, events), sensitiveOld); len(found) > 0 {
		t.Errorf("web's events hold %s", strings.Join(found, ", "))
	}
}
