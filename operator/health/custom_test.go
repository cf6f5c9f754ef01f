package health

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/internal/cachetest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
)

// databaseCRD is a small CRD standing for an operator's (a CloudNativePG
// Cluster): its controller writes status.conditions and
// status.observedGeneration.
const databaseCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: databases.db.example.com
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
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
          status: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

const databaseAPIVersion = "db.example.com/v1"

// TestACustomResourceIsReadyWhenKstatusSaysItIsCurrent: a chart whose
// real workload is a custom resource is not ready while the resource's
// status says Ready=False at its current generation (with that
// condition's message), ready once it says Ready=True, failed when it says
// Stalled; one with no status is ready. Only a release holding a custom
// resource costs a read, one per resource; one whose kind is no longer
// served, or that the agent may not read, does not fail the check.
func TestACustomResourceIsReadyWhenKstatusSaysItIsCurrent(t *testing.T) {
	ctx, api, cfg := appCluster(t)
	installCRD(ctx, t, api, databaseCRD, "databases.db.example.com")
	main := database(ctx, t, api, "main")
	database(ctx, t, api, "fresh")

	check := func(inventory ...v1alpha1.ObjectRef) (v1alpha1.ComponentStatus, []v1alpha1.ComponentStatus, int) {
		t.Helper()
		gets := 0
		comps, err := ComponentStatuses(ctx, api, cachetest.Counting{Reader: api, Gets: &gets}, inventory, time.Time{}, nil, nil, time.Time{}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range comps {
			if c.Name == OthersComponent {
				return c, comps, gets
			}
		}
		return v1alpha1.ComponentStatus{}, comps, gets
	}
	ref := func(name string) v1alpha1.ObjectRef {
		return v1alpha1.ObjectRef{APIVersion: databaseAPIVersion, Kind: "Database", Namespace: "app", Name: name}
	}
	setStatus := func(u *unstructured.Unstructured, conditions ...map[string]any) {
		t.Helper()
		conds := make([]any, len(conditions))
		for i, c := range conditions {
			c["lastTransitionTime"] = metav1.Now().UTC().Format(time.RFC3339)
			conds[i] = c
		}
		u.Object["status"] = map[string]any{"observedGeneration": u.GetGeneration(), "conditions": conds}
		if err := api.Status().Update(ctx, u); err != nil {
			t.Fatal(err)
		}
	}

	// A chart without a custom resource: no read more than before.
	if _, comps, gets := check(
		v1alpha1.ObjectRef{APIVersion: "v1", Kind: "Service", Namespace: "app", Name: "db"},
		v1alpha1.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "app", Name: "db"},
		v1alpha1.ObjectRef{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy", Namespace: "app", Name: "db"},
	); len(comps) != 0 || gets != 0 {
		t.Errorf("built-in objects only: components %+v with %d reads, want none and none", comps, gets)
	}

	const waiting = "Waiting for the instances to become active (1 of 3 ready)"
	setStatus(main, map[string]any{"type": "Ready", "status": "False", "reason": "ClusterIsNotReady", "message": waiting})
	cs, _, gets := check(ref("main"))
	if cs.Ready || len(cs.Workloads) != 1 || cs.Workloads[0].Failed || cs.Workloads[0].Message != waiting {
		t.Errorf("Ready=False at the observed generation: %+v, want component %q not ready (not failed) with the condition's message", cs, OthersComponent)
	}
	if gets != 1 {
		t.Errorf("%d reads for one custom resource, want 1", gets)
	}
	if s := NotReadySummary([]v1alpha1.ComponentStatus{cs}); !strings.Contains(s, "Database/main: "+waiting) {
		t.Errorf("the Ready message %q does not say why", s)
	}

	setStatus(main, map[string]any{"type": "Ready", "status": "True", "reason": "ClusterIsReady", "message": "Cluster is Ready"})
	if cs, _, _ := check(ref("main")); !cs.Ready || len(cs.Workloads) != 1 || !cs.Workloads[0].Ready {
		t.Errorf("Ready=True: %+v, want ready", cs)
	}
	// No status at all (no operator has seen it, or it writes none): kstatus
	// says Current.
	if cs, _, _ := check(ref("fresh")); !cs.Ready {
		t.Errorf("no status: %+v, want ready", cs)
	}

	setStatus(main, map[string]any{"type": "Stalled", "status": "True", "reason": "BootstrapFailed", "message": "the bootstrap job failed"})
	if cs, _, _ := check(ref("main"), ref("fresh")); cs.Ready || len(cs.Workloads) != 2 || !cs.Workloads[1].Failed ||
		!strings.Contains(cs.Workloads[1].Message, "the bootstrap job failed") {
		t.Errorf("Stalled: %+v, want Database/main failed with its message", cs)
	}

	// An identity that may not read the kind (the agent, for an
	// environment applied as its service account): not judged, ready,
	// saying so; the check goes on.
	stranger := impersonating(t, cfg, "stranger")
	comps, err := ComponentStatuses(ctx, api, stranger, []v1alpha1.ObjectRef{ref("main")}, time.Time{}, nil, nil, time.Time{}, nil, nil)
	if err != nil {
		t.Fatalf("a custom resource the agent may not read failed the check: %v", err)
	}
	if len(comps) != 1 || !comps[0].Ready || !strings.Contains(comps[0].Workloads[0].Message, "not judged") {
		t.Errorf("forbidden: %+v, want ready and not judged, saying so", comps)
	}

	// The CRD removed: its objects cannot exist. Not ready, and no error,
	// whether the reader has the kind's mapping cached or not.
	crd := &unstructured.Unstructured{}
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	crd.SetName("databases.db.example.com")
	if err := api.Delete(ctx, crd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the CRD to be gone", func() bool { return apierrors.IsNotFound(api.Get(ctx, client.ObjectKeyFromObject(crd), crd)) })
	waitFor(t, "the kind to be no longer served", func() bool {
		return !served(t, cfg, "db.example.com")
	})
	newClient, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, live := range map[string]client.Reader{"a reader that had the kind mapped": api, "a new reader": newClient} {
		comps, err := ComponentStatuses(ctx, api, live, []v1alpha1.ObjectRef{ref("main"),
			{APIVersion: "v1", Kind: "Service", Namespace: "app", Name: "db"}}, time.Time{}, nil, nil, time.Time{}, nil, nil)
		if err != nil {
			t.Errorf("%s: a kind no longer served failed the check: %v", name, err)
			continue
		}
		if len(comps) != 1 || comps[0].Ready || comps[0].Workloads[0].Failed {
			t.Errorf("%s: %+v, want not ready (not failed)", name, comps)
		}
	}
}

// TestBuiltinGroupsAreWhatTheAPIServerServes: every API group a bare
// API server serves is built in (no read more for its objects), a CRD's
// group is not, nor is a CRD's group under k8s.io.
func TestBuiltinGroupsAreWhatTheAPIServerServes(t *testing.T) {
	c := testcluster.StartT(t, testcluster.Options{})
	dc, err := discovery.NewDiscoveryClientForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups.Groups {
		for _, v := range g.Versions {
			if IsCustomResource(v.GroupVersion) {
				t.Errorf("%s, which the API server serves itself, counts as a custom resource's: add %q to builtinGroups", v.GroupVersion, g.Name)
			}
		}
	}
	for _, apiVersion := range []string{databaseAPIVersion, "postgresql.cnpg.io/v1", "cert-manager.io/v1",
		"gateway.networking.k8s.io/v1", "snapshot.storage.k8s.io/v1", "cluster.x-k8s.io/v1beta1"} {
		if !IsCustomResource(apiVersion) {
			t.Errorf("%s counts as built in", apiVersion)
		}
	}
	for _, apiVersion := range []string{"v1", "apps/v1", "batch/v1", "policy/v1", "autoscaling/v2", "networking.k8s.io/v1"} {
		if IsCustomResource(apiVersion) {
			t.Errorf("%s counts as a custom resource's", apiVersion)
		}
	}
}

// installCRD creates a CRD from YAML and waits until it is established.
func installCRD(ctx context.Context, t *testing.T, api client.Client, doc, name string) {
	t.Helper()
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &crd.Object); err != nil {
		t.Fatal(err)
	}
	if err := api.Create(ctx, crd); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "CRD "+name+" to be established", func() bool {
		if err := api.Get(ctx, client.ObjectKey{Name: name}, crd); err != nil {
			return false
		}
		conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, c := range conds {
			if m, _ := c.(map[string]any); m["type"] == "Established" && m["status"] == "True" {
				return true
			}
		}
		return false
	})
}

// database creates a Database with no status in namespace app.
func database(ctx context.Context, t *testing.T, api client.Client, name string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": databaseAPIVersion, "kind": "Database",
		"metadata": map[string]any{"namespace": "app", "name": name},
		"spec":     map[string]any{"instances": int64(3)},
	}}
	// The client's mapper learns the new kind on a retry.
	waitFor(t, "Database "+name+" to be created", func() bool { return api.Create(ctx, u.DeepCopy()) == nil })
	if err := api.Get(ctx, client.ObjectKey{Namespace: "app", Name: name}, u); err != nil {
		t.Fatal(err)
	}
	return u
}

// impersonating is a client of cfg's cluster acting as user, who is
// granted nothing.
func impersonating(t *testing.T, cfg *rest.Config, user string) client.Client {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// served reports whether the API server's discovery lists group.
func served(t *testing.T, cfg *rest.Config, group string) bool {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		return true
	}
	for _, g := range groups.Groups {
		if g.Name == group {
			return true
		}
	}
	return false
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestACustomResourcesConditionMessageShowsNoSensitiveValue: a database
// operator's Ready=False message may quote the connection string it could
// not use, password and all, and it went as written into the component's
// status and the deployment's Ready message (the web UI, anyone who may
// read StyrminDeployments). A message a custom resource's condition holds
// is masked with the namespace's sensitive values, or withheld, saying
// why, when they cannot be read, as a container's termination message
// is; it is cut to a bound. The values are read once a check, and only
// for such a message: not for a resource that is ready, nor for kstatus's
// own words (a generation not observed yet).
func TestACustomResourcesConditionMessageShowsNoSensitiveValue(t *testing.T) {
	ctx, api, cfg := appCluster(t)
	installCRD(ctx, t, api, databaseCRD, "databases.db.example.com")
	main := database(ctx, t, api, "main")
	other := database(ctx, t, api, "other")
	const value = "launch-code-4711"
	if err := api.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: v1alpha1.SensitiveSecretName},
		Data: map[string][]byte{"d1": []byte(value)}}); err != nil {
		t.Fatal(err)
	}
	refused := "connection to postgres://app:" + value + "@db:5432/app failed: password authentication failed"
	setStatus := func(u *unstructured.Unstructured, typ, status, msg string) {
		t.Helper()
		if err := api.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
			t.Fatal(err)
		}
		u.Object["status"] = map[string]any{"observedGeneration": u.GetGeneration(), "conditions": []any{map[string]any{
			"type": typ, "status": status, "reason": "Reason", "message": msg, "lastTransitionTime": metav1.Now().UTC().Format(time.RFC3339)}}}
		if err := api.Status().Update(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	refs := []v1alpha1.ObjectRef{
		{APIVersion: databaseAPIVersion, Kind: "Database", Namespace: "app", Name: "main"},
		{APIVersion: databaseAPIVersion, Kind: "Database", Namespace: "app", Name: "other"},
	}
	check := func(secrets client.Reader) (shown string, reads int) {
		t.Helper()
		sensitive := NamespaceSensitive(ctx, cachetest.Counting{Reader: secrets, Gets: &reads}, "app")
		comps, err := ComponentStatuses(ctx, api, api, refs, time.Time{}, nil, nil, time.Time{}, nil, sensitive)
		if err != nil {
			t.Fatal(err)
		}
		b, err := yaml.Marshal(comps)
		if err != nil {
			t.Fatal(err)
		}
		return string(b) + "\nReady: " + NotReadySummary(comps), reads
	}
	noValue := func(what, shown string) {
		t.Helper()
		if strings.Contains(shown, value) {
			t.Errorf("%s shows the sensitive value:\n%s", what, shown)
		}
	}

	setStatus(main, "Ready", "False", refused)
	setStatus(other, "Stalled", "True", "bootstrap failed: "+refused)
	shown, reads := check(api)
	noValue("Ready=False and Stalled quoting the password", shown)
	masked := "postgres://app:" + resolver.Masked + "@db:5432/app"
	if !strings.Contains(shown, "Database/main: connection to "+masked) || !strings.Contains(shown, "failed: bootstrap failed: connection to "+masked) {
		t.Errorf("the messages are not shown masked:\n%s", shown)
	}
	if reads != 1 {
		t.Errorf("the sensitive values were read %d times for one check, want once", reads)
	}

	// Whoever reads them may not (the Secret forbidden): withheld, saying
	// why, never shown unmasked.
	shown, _ = check(impersonating(t, cfg, "stranger"))
	noValue("the values unreadable", shown)
	if !strings.Contains(shown, "bytes of status message withheld: the deployment's sensitive values could not be read") || !strings.Contains(shown, "forbidden") {
		t.Errorf("the values unreadable: the messages are not withheld, saying why:\n%s", shown)
	}

	// Ready, or not ready in kstatus's own words: nothing to mask, no read.
	setStatus(main, "Ready", "True", "ready at "+refused)
	setStatus(other, "Ready", "True", "ready")
	if err := api.Get(ctx, client.ObjectKeyFromObject(other), other); err != nil {
		t.Fatal(err)
	}
	other.Object["spec"] = map[string]any{"instances": int64(5)}
	if err := api.Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	shown, reads = check(api)
	if reads != 0 || !strings.Contains(shown, "latest observed generation is 1") {
		t.Errorf("one ready, one at a generation not observed: %d reads of the values, want none:\n%s", reads, shown)
	}

	// A condition of any length is cut after it is masked.
	setStatus(main, "Ready", "False", refused+strings.Repeat(" and again", 10000))
	shown, _ = check(api)
	noValue("a long message", shown)
	if len(shown) > 4<<10 || !strings.Contains(shown, "connection to "+masked) {
		t.Errorf("a message of %d bytes is shown in %d, want it cut to about 1 KiB, masked", len(refused)+100000, len(shown))
	}
}

// TestAGoneJobsEndReadFromAnEventShowsNoSensitiveValue: a Job deleted
// before a check saw it end is judged by the Job controller's events about
// it, and a failure's message went into the status as written. An event
// another writer than the agent wrote is masked, as everywhere else
// (EventMessage): events about a Job may be written by anyone who may
// create events in the namespace.
func TestAGoneJobsEndReadFromAnEventShowsNoSensitiveValue(t *testing.T) {
	ctx, api, _ := appCluster(t)
	const value = "launch-code-4711"
	if err := api.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: v1alpha1.SensitiveSecretName},
		Data: map[string][]byte{"d1": []byte(value)}}); err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	if err := api.Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "migrate.failed"},
		InvolvedObject: corev1.ObjectReference{Kind: "Job", Namespace: "app", Name: "migrate", APIVersion: "batch/v1"},
		Reason:         "BackoffLimitExceeded", Type: corev1.EventTypeWarning, Source: corev1.EventSource{Component: "job-controller"},
		Message:        "Job has reached the specified backoff limit: psql postgres://app:" + value + "@db/app",
		FirstTimestamp: now, LastTimestamp: now, Count: 1}); err != nil {
		t.Fatal(err)
	}
	reads := 0
	sensitive := NamespaceSensitive(ctx, cachetest.Counting{Reader: api, Gets: &reads}, "app")
	comps, err := ComponentStatuses(ctx, api, api, []v1alpha1.ObjectRef{{APIVersion: "batch/v1", Kind: "Job", Namespace: "app", Name: "migrate"}},
		time.Time{}, nil, nil, now.Add(-time.Minute), nil, sensitive)
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) != 1 || len(comps[0].Workloads) != 1 {
		t.Fatalf("components %+v, want the Job's", comps)
	}
	w := comps[0].Workloads[0]
	if !w.Failed || strings.Contains(w.Message, value) || !strings.Contains(w.Message, "postgres://app:"+resolver.Masked+"@db/app") || reads != 1 {
		t.Errorf("a gone Job's failure read from its event: %+v, %d reads of the values; want failed, masked, one read", w, reads)
	}
}
