package charts_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/testcluster"
)

// TestAPIServerAcceptsWhatBothInstallsCreate pins that a real API server
// takes every object of the chart (defaults and every option) and of the
// kustomize base (`kubectl apply -k config/`, the Secret examples too),
// in a server-side dry-run with strict field validation: schemas, CEL
// of the admission policy, the downward API's divisor, unknown fields.
func TestAPIServerAcceptsWhatBothInstallsCreate(t *testing.T) {
	_, cl := startAPIServer(t)
	ctx := context.Background()
	// Namespaced objects are checked only in a namespace that exists.
	ns := object(t, config.Namespace())
	if err := cl.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	installServiceMonitorCRD(t, cl)

	installs := map[string][][]byte{}
	for name, vals := range map[string]map[string]any{"chart, defaults": required(), "chart, every option": everyOption()} {
		r := render(t, vals)
		for _, doc := range r.docs {
			installs[name] = append(installs[name], doc)
		}
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), "../config")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Resources() {
		if r.GetKind() == "Namespace" {
			continue // made above
		}
		doc, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		installs["kustomize base"] = append(installs["kustomize base"], doc)
	}
	installs["kustomize base"] = append(installs["kustomize base"], config.SecretExamples()...)

	for name, docs := range installs {
		for _, doc := range docs {
			u := object(t, doc)
			if err := dryRunCreate(ctx, cl, u); err != nil {
				t.Errorf("%s: %s %s: %v", name, u.GetKind(), u.GetName(), err)
			}
		}
		t.Logf("%s: %d objects checked", name, len(docs))
	}
}

// TestAgentReadsItsOwnSecretsWithoutTheDefaultEnvironmentBinding pins
// that the agent, with the base's RBAC but not the default environment's
// ClusterRoleBinding (strict tenancy, docs/tenancy.md), still reads its
// repository and webhook Secrets, and no other Secret.
func TestAgentReadsItsOwnSecretsWithoutTheDefaultEnvironmentBinding(t *testing.T) {
	c, admin := startAPIServer(t)
	docs := [][]byte{config.Namespace()}
	for _, doc := range config.RBAC() {
		if u := object(t, doc); u.GetKind() != "ClusterRoleBinding" || u.GetName() != "styrmin-agent-default-environment" {
			docs = append(docs, doc)
		}
	}
	docs = append(docs, config.SecretExamples()...)
	docs = append(docs, []byte("{apiVersion: v1, kind: Secret, metadata: {name: someone-else, namespace: styrmin-system}}"))
	agenttest.Apply(t, admin, "test", docs)

	cfg := rest.CopyConfig(c.RESTConfig)
	cfg.Impersonate.UserName = "system:serviceaccount:" + config.AgentNamespace + ":" + config.AgentServiceAccount
	agent, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, doc := range config.SecretExamples() {
		name := object(t, doc).GetName()
		if err := agent.Get(ctx, client.ObjectKey{Namespace: config.AgentNamespace, Name: name}, &corev1.Secret{}); err != nil {
			t.Errorf("the agent reading Secret %s: %v", name, err)
		}
	}
	err = agent.Get(ctx, client.ObjectKey{Namespace: config.AgentNamespace, Name: "someone-else"}, &corev1.Secret{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the agent reading another Secret: %v, want forbidden", err)
	}
}

// installServiceMonitorCRD installs a stand-in for the Prometheus
// operator's ServiceMonitor CRD: its group, version, kind and scope, any
// content. The real one is not at hand; this checks that the chart's
// ServiceMonitor names them right.
func installServiceMonitorCRD(t *testing.T, cl client.Client) {
	t.Helper()
	crd := object(t, []byte(`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: servicemonitors.monitoring.coreos.com}
spec:
  group: monitoring.coreos.com
  names: {kind: ServiceMonitor, listKind: ServiceMonitorList, plural: servicemonitors, singular: servicemonitor}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}
`))
	if err := cl.Create(context.Background(), crd); err != nil {
		t.Fatal(err)
	}
}

// startAPIServer starts etcd and an API server for the test, with a
// client acting as the administrator.
func startAPIServer(t *testing.T) (*testcluster.Cluster, client.Client) {
	t.Helper()
	c := testcluster.StartT(t, testcluster.Options{})
	cl, err := client.New(c.RESTConfig, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c, cl
}

// dryRunCreate creates u with a server-side dry-run, retrying while the
// API server does not serve its kind yet (a CRD just made).
func dryRunCreate(ctx context.Context, cl client.Client, u *unstructured.Unstructured) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := cl.Create(ctx, u.DeepCopy(), client.DryRunAll, client.FieldValidation("Strict"))
		if err == nil || !meta.IsNoMatchError(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func object(t *testing.T, doc []byte) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(doc, &u.Object); err != nil {
		t.Fatal(fmt.Errorf("%w:\n%s", err, doc))
	}
	return u
}
