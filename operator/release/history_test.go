package release

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/secrettest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// sensitiveSecretExists tells whether the namespace holds the Secret of
// sensitive values.
func (e *releaseEnv) sensitiveSecretExists(t *testing.T, ns string) bool {
	t.Helper()
	_, err := e.cs.CoreV1().Secrets(ns).Get(context.Background(), v1alpha1.SensitiveSecretName, metav1.GetOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

// TestUninstallRemovesTheValuesSecretEvenWhenNoRevisionWasRecorded pins
// that the Secret of sensitive values never outlives the release: an
// install refused on its first object writes the Secret but records no
// revision, and its uninstall removes the Secret all the same; so does
// the retry of an uninstall whose records were already deleted. The
// refusal names no value.
func TestUninstallRemovesTheValuesSecretEvenWhenNoRevisionWasRecorded(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "values-left"
	e.namespace(t, ns)
	const value = "hunter2-never-recorded"
	ph := resolver.Placeholder(resolver.ID{Cluster: "c", Environment: "e", Name: "d"}, "token", value)
	req := releaseReq(ns, configMap(ns, "zz_invalid", ph))
	req.Sensitive = resolver.Sensitive{ph: value}
	_, _, err := e.helm.Apply(ctx, req, nil, 0)
	if err == nil {
		t.Fatal("an install of an object with an invalid name succeeded")
	}
	if leaks := secrettest.Find([]byte(err.Error()), value); len(leaks) > 0 {
		t.Fatalf("the install's error holds %v", leaks)
	}
	if n := e.releaseRecordCount(t, ns); n != 0 || !e.sensitiveSecretExists(t, ns) {
		t.Fatalf("before the uninstall: %d records, values Secret there: %v; want none and the Secret", n, e.sensitiveSecretExists(t, ns))
	}
	if err := e.helm.Uninstall(ctx, ns, "app", nil, nil); err != nil {
		t.Fatal(err)
	}
	if e.sensitiveSecretExists(t, ns) {
		t.Fatal("the values Secret outlived the uninstall of a release without records")
	}

	// An uninstall that deleted the records and failed on the Secret is
	// retried with no record left.
	req = releaseReq(ns, configMap(ns, "a", ph))
	req.Sensitive = resolver.Sensitive{ph: value}
	if _, _, err := e.helm.Apply(ctx, req, nil, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.helm.records.removeAll(ctx, ns, "app"); err != nil {
		t.Fatal(err)
	}
	if err := e.helm.Uninstall(ctx, ns, "app", nil, nil); err != nil {
		t.Fatal(err)
	}
	if e.sensitiveSecretExists(t, ns) {
		t.Fatal("the values Secret outlived the retried uninstall")
	}
}

// TestAReleaseWithoutSensitiveValuesAnyMoreRemovesTheValuesSecret pins
// that the Secret of sensitive values goes once a revision without any
// deployed, and is kept while the deployed revision still uses it (an
// upgrade without values that fails).
func TestAReleaseWithoutSensitiveValuesAnyMoreRemovesTheValuesSecret(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "values-dropped"
	e.namespace(t, ns)
	const value = "hunter2-dropped"
	ph := resolver.Placeholder(resolver.ID{Cluster: "c", Environment: "e", Name: "d"}, "token", value)
	req := releaseReq(ns, configMap(ns, "a", ph))
	req.Sensitive = resolver.Sensitive{ph: value}
	r1, _, err := e.helm.Apply(ctx, req, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.configMaps(t, ns); got != "a="+value || !e.sensitiveSecretExists(t, ns) {
		t.Fatalf("after the install: config maps %q, values Secret there: %v", got, e.sensitiveSecretExists(t, ns))
	}
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "plain"), configMap(ns, "zz_invalid", "x")), r1, 1); err == nil {
		t.Fatal("an upgrade with an invalid object name succeeded")
	}
	if !e.sensitiveSecretExists(t, ns) {
		t.Fatal("a failed upgrade without values removed the Secret the deployed revision reveals with")
	}
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "plain")), r1, 1); err != nil {
		t.Fatal(err)
	}
	if got := e.configMaps(t, ns); got != "a=plain" {
		t.Fatalf("config maps %q, want a=plain", got)
	}
	if e.sensitiveSecretExists(t, ns) {
		t.Fatal("the values Secret outlived the last revision that had sensitive values")
	}
}

// TestAnUpgradeSkipsObjectsOfAKindNoLongerServedWhenItPrunes pins that a
// previous revision holding an object whose kind the API server no
// longer serves (its CRD removed) does not fail the upgrade at the
// prune: the object is skipped, the others are pruned, and the next
// upgrade works too.
func TestAnUpgradeSkipsObjectsOfAKindNoLongerServedWhenItPrunes(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "kind-gone"
	e.namespace(t, ns)
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1"), configMap(ns, "b", "1")), nil, 0); err != nil {
		t.Fatal(err)
	}
	// Revision 2 as a release whose Widget CRD was removed since leaves it.
	rel, err := e.helm.records.get(ctx, ns, "app", 1)
	if err != nil {
		t.Fatal(err)
	}
	rel.Version = 2
	rel.Manifest += "---\n# Source: x/widget-w.yaml\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n"
	if _, err := e.helm.records.create(ctx, rel, nil); err != nil {
		t.Fatal(err)
	}
	rel.Version = 1
	rel.SetStatus("superseded", "Superseded by revision 2")
	if err := e.helm.records.update(ctx, rel); err != nil {
		t.Fatal(err)
	}
	r3, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "3")), nil, 2)
	if err != nil {
		t.Fatalf("upgrade after a revision holding a kind no longer served: %v", err)
	}
	if got := e.configMaps(t, ns); got != "a=3" {
		t.Fatalf("config maps %q, want a=3 (b pruned)", got)
	}
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "4")), r3, 3); err != nil {
		t.Fatal(err)
	}
	if got := e.history(t, ns, "app"); got != "1:superseded 2:superseded 3:superseded 4:deployed" {
		t.Fatalf("history %q", got)
	}
}

// TestObjectsAFailedRevisionCreatedArePrunedByTheFixAndUninstalled pins
// that the objects a failed revision created before it failed are the
// release's: the fix that follows prunes those it no longer has (though
// the caller knows only the deployed revision before the failure), an
// uninstall after a failed revision deletes them and those of the
// deployed revision the failed one dropped, and an object of another
// manager that a failed revision listed is left alone throughout.
func TestObjectsAFailedRevisionCreatedArePrunedByTheFixAndUninstalled(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "failed-leftovers"
	e.namespace(t, ns)
	theirs := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "t", Namespace: ns}, Data: map[string]string{"v": "theirs"}}
	if _, err := e.cs.CoreV1().ConfigMaps(ns).Create(ctx, theirs, metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
		t.Fatal(err)
	}
	r1, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1")), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Revision 2 creates x, then is refused t (another manager's).
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "2"), configMap(ns, "x", "2"), configMap(ns, "t", "ours")), r1, 1); !apierrors.IsConflict(err) {
		t.Fatalf("revision 2 over another manager's object: %v, want a conflict", err)
	}
	if got := e.configMaps(t, ns); got != "a=2 t=theirs x=2" {
		t.Fatalf("after the failed revision: config maps %q", got)
	}
	// The fix, from what the caller knows: revision 1.
	r3, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "3"), configMap(ns, "k", "3")), r1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.configMaps(t, ns); got != "a=3 k=3 t=theirs" {
		t.Fatalf("after the fix: config maps %q, want x pruned and t left alone", got)
	}
	// Revision 4 drops k, creates yy and fails; the uninstall that follows
	// deletes what revisions 3 and 4 created.
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "4"), configMap(ns, "yy", "4"), configMap(ns, "zz_invalid", "4")), r3, 3); err == nil {
		t.Fatal("an upgrade with an invalid object name succeeded")
	}
	if got, h := e.configMaps(t, ns), e.history(t, ns, "app"); got != "a=4 k=3 t=theirs yy=4" || h != "1:superseded 2:failed 3:deployed 4:failed" {
		t.Fatalf("after the second failed revision: config maps %q, history %q", got, h)
	}
	if err := e.helm.Uninstall(ctx, ns, "app", nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := e.configMaps(t, ns); got != "t=theirs" {
		t.Fatalf("after the uninstall: config maps %q, want only the other manager's t", got)
	}
}

// TestFailedRetriesAreTrimmedToTheHistoryBound pins that each record
// written, failed or deployed, is followed by a trim to MaxHistory, oldest
// first: failed retries of a change do not pile up records, the deployed
// revision the status names (and the failure after it, which the next
// retry, starting from that revision, finds) is never trimmed while they
// fail, and the history is back to the bound's last revisions once a
// revision deploys.
func TestFailedRetriesAreTrimmedToTheHistoryBound(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 3)
	ctx := context.Background()
	const ns = "retries"
	e.namespace(t, ns)
	r1, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1")), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The controller keeps what the last successful apply returned.
	for i := 0; i < 5; i++ {
		if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "2"), configMap(ns, "zz_invalid", "2")), r1, 1); err == nil {
			t.Fatal("an upgrade with an invalid object name succeeded")
		}
		if n := e.releaseRecordCount(t, ns); n > 3 {
			t.Fatalf("after failed retry %d: %d records (history %s), above the bound of 3", i+1, n, e.history(t, ns, "app"))
		}
	}
	if got := e.history(t, ns, "app"); got != "1:deployed 2:failed 6:failed" {
		t.Fatalf("history after the failed retries %q, want the deployed revision, the failure after it and the last one", got)
	}
	if _, _, err := e.helm.Check(ctx, ns, "app", 1, "", nil, nil); err != nil {
		t.Fatalf("drift check of the deployed revision after the failed retries: %v", err)
	}
	r7, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "3")), r1, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := e.history(t, ns, "app"); got != "6:failed 7:deployed" {
		t.Fatalf("history after the fix %q, want 6:failed 7:deployed", got)
	}
	r8, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "4")), r7, 7)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "5")), r8, 8); err != nil {
		t.Fatal(err)
	}
	if got := e.history(t, ns, "app"); got != "7:superseded 8:superseded 9:deployed" {
		t.Fatalf("history after two more upgrades %q, want 7:superseded 8:superseded 9:deployed", got)
	}
}

// TestAFailedRevisionListingAnObjectNoOtherRecordListsIsNotTrimmed pins
// that trimming failed retries to the bound keeps a failed revision that
// created an object no later record lists (a change that added it, failed
// after applying it, then was changed again without it): its record is
// what has the fix prune the object, or the uninstall delete it; trimmed,
// the object outlived the release. The bound is exceeded by that record
// alone: the retries after it are still trimmed.
func TestAFailedRevisionListingAnObjectNoOtherRecordListsIsNotTrimmed(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 4)
	ctx := context.Background()
	for _, end := range []string{"fix", "uninstall"} {
		t.Run(end, func(t *testing.T) {
			ns := "trim-" + end
			e.namespace(t, ns)
			r1, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1")), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			// Change A fails (revision 2), change B adds z and fails after
			// applying it (3), change C drops z and fails on (4 to 7); each
			// from the deployed revision, as the controller retries.
			changes := [][]drivers.Object{
				{configMap(ns, "a", "A"), configMap(ns, "zz_invalid", "A")},
				{configMap(ns, "a", "B"), configMap(ns, "z", "B"), configMap(ns, "zz_invalid", "B")},
			}
			for range 4 {
				changes = append(changes, []drivers.Object{configMap(ns, "a", "C"), configMap(ns, "zz_invalid", "C")})
			}
			for i, objs := range changes {
				if _, _, err := e.helm.Apply(ctx, releaseReq(ns, objs...), r1, 1); err == nil {
					t.Fatalf("failing change %d succeeded", i+1)
				}
			}
			if got := e.history(t, ns, "app"); got != "1:deployed 2:failed 3:failed 7:failed" {
				t.Errorf("history after the failed changes %q, want the deployed revision, the failure after it, the one that created z and the last", got)
			}
			if got := e.configMaps(t, ns); got != "a=C z=B" {
				t.Fatalf("config maps %q", got)
			}
			switch end {
			case "fix":
				if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "fixed")), r1, 1); err != nil {
					t.Fatal(err)
				}
				if got := e.configMaps(t, ns); got != "a=fixed" {
					t.Fatalf("config maps after the fix %q, want z pruned", got)
				}
			case "uninstall":
				if err := e.helm.Uninstall(ctx, ns, "app", nil, nil); err != nil {
					t.Fatal(err)
				}
				if got := e.configMaps(t, ns); got != "" {
					t.Fatalf("config maps after the uninstall %q, want none", got)
				}
			}
		})
	}
}

// TestARevisionLeftDeployedByAnAgentKilledBeforeSupersedingIsSupersededByTheNext
// pins that an agent stopped between writing revision 2 and superseding
// revision 1 (two "deployed" records, the status still naming 1) leaves
// one deployed revision after the next apply: every older record still
// marked deployed is superseded.
func TestARevisionLeftDeployedByAnAgentKilledBeforeSupersedingIsSupersededByTheNext(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "two-deployed"
	e.namespace(t, ns)
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1")), nil, 0); err != nil {
		t.Fatal(err)
	}
	// What the stopped agent wrote: revision 2, deployed; revision 1 not
	// superseded yet.
	rel, err := e.helm.records.get(ctx, ns, "app", 1)
	if err != nil {
		t.Fatal(err)
	}
	rel.Version = 2
	if _, err := e.helm.records.create(ctx, rel, nil); err != nil {
		t.Fatal(err)
	}
	if got := e.history(t, ns, "app"); got != "1:deployed 2:deployed" {
		t.Fatalf("history before the restart %q", got)
	}
	// The agent restarted: nothing in memory, the status names revision 1.
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "3")), nil, 1); err != nil {
		t.Fatal(err)
	}
	if got := e.history(t, ns, "app"); got != "1:superseded 2:superseded 3:deployed" {
		t.Fatalf("history after the next apply %q, want 1:superseded 2:superseded 3:deployed", got)
	}
}

// TestARefusalQuotingARevealedValueIsMasked: the agent puts a sensitive
// value in place of its placeholder only in the request, and the API
// server's refusal may quote what it was sent (Invalid value: "…"). That
// refusal became the record's description, the StyrminDeployment's
// conditions, an event and a log line, the value in clear.
func TestARefusalQuotingARevealedValueIsMasked(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "values-quoted"
	e.namespace(t, ns)
	// A label value may not hold a space: the API server quotes it.
	const value = "open sesame-quoted"
	ph := resolver.Placeholder(resolver.ID{Cluster: "c", Environment: "e", Name: "d"}, "token", value)
	labelled := drivers.Object{APIVersion: "v1", Kind: "ConfigMap", Name: "b", Namespace: ns, Component: "app",
		YAML: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: b\n  namespace: " + ns + "\n  labels:\n    token: \"" + ph + "\"\ndata:\n  v: x\n")}
	req := releaseReq(ns, configMap(ns, "a", ph), labelled)
	req.Sensitive = resolver.Sensitive{ph: value}
	_, _, err := e.helm.Apply(ctx, req, nil, 0)
	if err == nil {
		t.Fatal("an object with a space in a label value was accepted")
	}
	if !apierrors.IsInvalid(err) {
		t.Errorf("the refusal is no longer an Invalid status (%T: %v): whoever classifies it would retry it", err, err)
	}
	if leaks := secrettest.Find([]byte(err.Error()), value); len(leaks) > 0 {
		t.Fatalf("the refusal holds %v: %v", leaks, err)
	}
	hist, herr := e.helm.records.history(ctx, ns, "app")
	if herr != nil || len(hist) != 1 {
		t.Fatalf("the failed revision's record: %d, %v; want one", len(hist), herr)
	}
	if leaks := secrettest.Find([]byte(hist[0].Info.Description), value); len(leaks) > 0 {
		t.Fatalf("the failed revision's description holds %v: %s", leaks, hist[0].Info.Description)
	}
}

// TestADriftCheckLeavesOutObjectsOfAKindNoLongerServed: a revision holding
// an object whose CRD was removed since made every drift check of the
// release fail after an agent restart (its manifest parsed afresh), so no
// other object of the deployment was checked or put back, for ever. The
// check now leaves that object out and checks the rest.
func TestADriftCheckLeavesOutObjectsOfAKindNoLongerServed(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "kind-gone-drift"
	e.namespace(t, ns)
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1")), nil, 0); err != nil {
		t.Fatal(err)
	}
	// Revision 2, deployed, also holds a Widget whose CRD is gone.
	rel, err := e.helm.records.get(ctx, ns, "app", 1)
	if err != nil {
		t.Fatal(err)
	}
	rel.Version = 2
	rel.Manifest += "---\n# Source: x/widget-w.yaml\napiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n"
	if _, err := e.helm.records.create(ctx, rel, nil); err != nil {
		t.Fatal(err)
	}
	cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"v": "by hand"}
	if _, err := e.cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
	_, drifts, err := e.helm.Check(ctx, ns, "app", 2, "", nil, nil)
	if err != nil {
		t.Fatalf("a drift check of a revision holding a kind no longer served: %v", err)
	}
	if got := Summary(drifts); !strings.Contains(got, "ConfigMap") || !strings.Contains(got, "a") {
		t.Fatalf("drifts %q, want ConfigMap a", got)
	}
}

// TestADriftCheckOfTheKeptRevisionLeavesOutObjectsOfAKindRemovedSince:
// with the revision kept in memory (no restart, the usual case), an
// object whose CRD was removed while the agent ran was taken as deleted,
// and its correction failed every interval with the API server's 404. It
// is left out as it is after a restart, and the others are checked and
// put back.
func TestADriftCheckOfTheKeptRevisionLeavesOutObjectsOfAKindRemovedSince(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "kind-removed-live"
	e.namespace(t, ns)
	dyn, err := dynamic.NewForConfig(e.cluster.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	crds := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	var crd map[string]any
	if err := yaml.Unmarshal([]byte(widgetCRD), &crd); err != nil {
		t.Fatal(err)
	}
	if _, err := crds.Create(ctx, &unstructured.Unstructured{Object: crd}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	widget := drivers.Object{APIVersion: "example.com/v1", Kind: "Widget", Name: "w", Namespace: ns, Component: "app",
		YAML: []byte("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n  namespace: " + ns + "\nspec:\n  size: 1\n")}
	var rev *Revision
	waitUntil(t, 30*time.Second, "the release with a Widget applied", func(ctx context.Context) (bool, string, error) {
		rev, _, err = e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1"), widget), nil, 0)
		return err == nil, fmt.Sprint(err), nil // until the new kind is served
	})
	d := rev.Desired()
	if err := crds.Delete(ctx, "widgets.example.com", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the CRD gone", func(ctx context.Context) (bool, string, error) {
		_, err := crds.Get(ctx, "widgets.example.com", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err), client.IgnoreNotFound(err)
	})
	e.editConfigMap(t, ns, "a", "by hand")
	var drifts []Drift
	waitUntil(t, 15*time.Second, "a check of the kept revision finding ConfigMap a alone", func(context.Context) (bool, string, error) {
		_, drifts, err = e.helm.Check(ctx, ns, "app", 1, "", nil, d)
		return err == nil && Summary(drifts) == "ConfigMap/a (.data.v)", fmt.Sprintf("drifts %q, %v", Summary(drifts), err), nil
	})
	if _, _, err := e.helm.Correct(ctx, d, drifts); err != nil {
		t.Fatalf("the correction: %v", err)
	}
	if _, drifts, err = e.helm.Check(ctx, ns, "app", 1, "", nil, d); err != nil || len(drifts) > 0 {
		t.Fatalf("after the correction: drifts %q, %v; want none", Summary(drifts), err)
	}
}

// waitUntil polls cond until it holds, failing the test with cond's last
// word after timeout.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, string, error)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ok, why, err := cond(ctx)
		last = why
		return ok, err
	})
	if err != nil {
		t.Fatalf("waiting for %s: %v (last: %s)", what, err, last)
	}
}

const widgetCRD = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

// editConfigMap sets a ConfigMap's data.v by hand, as kubectl edit does.
func (e *releaseEnv) editConfigMap(t *testing.T, ns, name, value string) {
	t.Helper()
	ctx := context.Background()
	cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data = map[string]string{"v": value}
	if _, err := e.cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
}

// TestACorrectionRefusedForOneObjectPutsTheOthersBack: a correction
// stopped at the first object the API server refused (here an admission
// policy refuses ConfigMap a its way back, as a PersistentVolumeClaim
// expanded by hand cannot shrink), so a Deployment after it in install
// order kept the image someone set by hand, and the objects put back
// before it were not told. Each object is now applied on its own: the
// Deployment is put back and returned as corrected, the refusal names
// ConfigMap a and why, and the next check finds only ConfigMap a.
func TestACorrectionRefusedForOneObjectPutsTheOthersBack(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "correction-refused"
	e.namespace(t, ns)
	rev, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1"), webDeployment(ns, "nginx:1.27")), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	d := rev.Desired()
	e.editConfigMap(t, ns, "a", "by hand")
	e.refuseConfigMapGoingBack(t, ns, "a", "1")
	e.setImage(t, ns, "web", "nginx:by-hand")
	_, drifts, err := e.helm.Check(ctx, ns, "app", 1, "", nil, d)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Summary(drifts), `ConfigMap/a (.data.v); Deployment/web (.spec.template.spec.containers[name="web"].image)`; got != want {
		t.Fatalf("drifts %q, want %q", got, want)
	}
	corrected, _, err := e.helm.Correct(ctx, d, drifts)
	ce, ok := errors.AsType[*CorrectionError](err)
	if !ok || len(ce.Refused) != 1 || ce.Refused[0].Drift.Ref().Name != "a" || !strings.Contains(err.Error(), "ConfigMap/a (.data.v)") ||
		!strings.Contains(err.Error(), "may not go back") {
		t.Fatalf("the correction's error: %v; want ConfigMap a refused, naming the policy's message", err)
	}
	if got := Summary(corrected); got != `Deployment/web (.spec.template.spec.containers[name="web"].image)` {
		t.Fatalf("corrected %q, want web", got)
	}
	e.requireWeb(t, ns, 1, "nginx:1.27", "after a correction that refused ConfigMap a,")
	if _, drifts, err = e.helm.Check(ctx, ns, "app", 1, "", nil, d); err != nil || Summary(drifts) != "ConfigMap/a (.data.v)" {
		t.Fatalf("the check after: drifts %q, %v; want ConfigMap a alone", Summary(drifts), err)
	}
}

// refuseConfigMapGoingBack makes the API server refuse to set ConfigMap
// name's data.v back to value once it holds another (an admission
// policy), and waits until it does.
func (e *releaseEnv) refuseConfigMapGoingBack(t *testing.T, ns, name, value string) {
	t.Helper()
	ctx := context.Background()
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-way-back-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}},
				},
			}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: fmt.Sprintf(`object.metadata.name != %q || !has(object.data) || !('v' in object.data) || object.data.v != %q || (has(oldObject.data) && 'v' in oldObject.data && oldObject.data.v == %q)`, name, value, value),
				Message:    "data.v may not go back",
			}},
		},
	}
	if _, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, policy, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns},
			}},
		},
	}
	if _, err := e.cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 30*time.Second, "the admission policy in force", func(ctx context.Context) (bool, string, error) {
		cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, "", err
		}
		cm.Data = map[string]string{"v": value}
		_, err = e.cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{DryRun: []string{metav1.DryRunAll}})
		return err != nil && strings.Contains(err.Error(), "may not go back"), fmt.Sprint(err), nil
	})
}

// TestReplicasAnAutoscalerOfTheReleaseSetsAreNotDrift: a chart setting a
// workload's replicas beside a HorizontalPodAutoscaler of its own that
// scales it had the replicas put back every drift interval, fighting the
// autoscaler (which takes them through the scale subresource). Only the
// autoscaled workload's replicas are left to it: its other fields still
// drift, and a workload no autoscaler scales has its replicas put back.
// Every correction of its other fields leaves them out, not only one in
// a check that found them taken: the second, with the same kept Desired,
// applied the chart's replicas, forced.
func TestReplicasAnAutoscalerOfTheReleaseSetsAreNotDrift(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "autoscaled"
	e.namespace(t, ns)
	worker := webDeployment(ns, "nginx:1.27")
	worker.Name, worker.YAML = "worker", []byte(strings.ReplaceAll(string(worker.YAML), "name: web\n", "name: worker\n"))
	hpa := drivers.Object{APIVersion: "autoscaling/v2", Kind: "HorizontalPodAutoscaler", Name: "web", Namespace: ns, Component: "web", YAML: []byte(`apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: web
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: web}
  minReplicas: 1
  maxReplicas: 5
  metrics:
  - type: Resource
    resource: {name: cpu, target: {type: Utilization, averageUtilization: 80}}
`)}
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, webDeployment(ns, "nginx:1.27"), worker, hpa), nil, 0); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"web", "worker"} {
		e.scaleDeployment(t, ns, name, 3)
	}
	_, drifts, err := e.helm.Check(ctx, ns, "app", 1, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Summary(drifts), "Deployment/worker (.spec.replicas)"; got != want {
		t.Fatalf("drifts %q, want %q: the autoscaled web's replicas are the autoscaler's", got, want)
	}
	// Its other fields are still Styrmin's.
	e.setImage(t, ns, "web", "nginx:by-hand")
	d, drifts, err := e.helm.Check(ctx, ns, "app", 1, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := Summary(drifts); !strings.Contains(got, `Deployment/web (.spec.template.spec.containers[name="web"].image)`) || strings.Contains(got, "web (.spec.replicas") {
		t.Fatalf("drifts %q, want web's image and not its replicas", got)
	}
	// The correction puts web's image back and leaves its replicas to the
	// autoscaler; the worker's go back to the chart's.
	if _, _, err := e.helm.Correct(ctx, d, drifts); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int32{"web": 3, "worker": 1} {
		dep, err := e.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := *dep.Spec.Replicas; got != want || dep.Spec.Template.Spec.Containers[0].Image != "nginx:1.27" {
			t.Errorf("after the correction %s runs %d replicas of %s; want %d of nginx:1.27", name, got, dep.Spec.Template.Spec.Containers[0].Image, want)
		}
	}
	if _, drifts, err = e.helm.Check(ctx, ns, "app", 1, "", nil, d); err != nil || len(drifts) > 0 {
		t.Fatalf("after the correction: drifts %q, %v; want none", Summary(drifts), err)
	}
	// A second edit, with the Desired the controller keeps: the replicas
	// are in no expected set since the first correction, and are still
	// the autoscaler's.
	e.setImage(t, ns, "web", "nginx:by-hand-again")
	if _, drifts, err = e.helm.Check(ctx, ns, "app", 1, "", nil, d); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.helm.Correct(ctx, d, drifts); err != nil {
		t.Fatal(err)
	}
	e.requireWeb(t, ns, 3, "nginx:1.27", "after the second correction")
}

// setImage sets the image of a Deployment's first container by hand, as
// kubectl edit or set image does.
func (e *releaseEnv) setImage(t *testing.T, ns, name, image string) {
	t.Helper()
	ctx := context.Background()
	dep, err := e.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dep.Spec.Template.Spec.Containers[0].Image = image
	if _, err := e.cs.AppsV1().Deployments(ns).Update(ctx, dep, metav1.UpdateOptions{FieldManager: "kubectl-edit"}); err != nil {
		t.Fatal(err)
	}
}

// requireWeb fails unless Deployment web runs replicas of image.
func (e *releaseEnv) requireWeb(t *testing.T, ns string, replicas int32, image, when string) {
	t.Helper()
	web, err := e.cs.AppsV1().Deployments(ns).Get(context.Background(), "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := *web.Spec.Replicas; got != replicas || web.Spec.Template.Spec.Containers[0].Image != image {
		t.Fatalf("%s web runs %d replicas of %s; want %d of %s", when, got, web.Spec.Template.Spec.Containers[0].Image, replicas, image)
	}
}

// scaleDeployment sets a Deployment's replicas through the scale
// subresource, as an autoscaler (or kubectl scale) does.
func (e *releaseEnv) scaleDeployment(t *testing.T, ns, name string, replicas int32) {
	t.Helper()
	ctx := context.Background()
	scale, err := e.cs.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	scale.Spec.Replicas = replicas
	if _, err := e.cs.AppsV1().Deployments(ns).UpdateScale(ctx, name, scale, metav1.UpdateOptions{FieldManager: "horizontal-pod-autoscaler"}); err != nil {
		t.Fatal(err)
	}
}

// TestReplicasAnAutoscalerFromOutsideTheReleaseSetsAreNotDrift: an
// autoscaler the chart does not render (made by hand, or by KEDA for a
// ScaledObject) had its workload's replicas put back every drift
// interval. It is found when the replicas are taken: they are left to it,
// while a workload it does not scale (another kind of the same name, or
// no autoscaler at all) has them put back. A later correction of the
// workload's other fields leaves them to it too: it applied the chart's,
// forced (KEDA's 10 replicas back to the chart's 2 after a kubectl set
// image).
func TestReplicasAnAutoscalerFromOutsideTheReleaseSetsAreNotDrift(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "autoscaled-outside"
	e.namespace(t, ns)
	worker := webDeployment(ns, "nginx:1.27")
	worker.Name, worker.YAML = "worker", []byte(strings.ReplaceAll(string(worker.YAML), "name: web\n", "name: worker\n"))
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, webDeployment(ns, "nginx:1.27"), worker), nil, 0); err != nil {
		t.Fatal(err)
	}
	minReplicas := int32(1)
	for name, target := range map[string]autoscalingv2.CrossVersionObjectReference{
		"keda-hpa-web":  {APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
		"worker-set":    {APIVersion: "apps/v1", Kind: "StatefulSet", Name: "worker"},
		"elsewhere-web": {APIVersion: "apps/v1", Kind: "Deployment", Name: "web"},
	} {
		hpaNS := ns
		if name == "elsewhere-web" {
			hpaNS = "default" // scales a web of its own namespace, not this one
		}
		hpa := &autoscalingv2.HorizontalPodAutoscaler{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: hpaNS},
			Spec:       autoscalingv2.HorizontalPodAutoscalerSpec{ScaleTargetRef: target, MinReplicas: &minReplicas, MaxReplicas: 5},
		}
		if _, err := e.cs.AutoscalingV2().HorizontalPodAutoscalers(hpaNS).Create(ctx, hpa, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"web", "worker"} {
		e.scaleDeployment(t, ns, name, 3)
	}
	d, drifts, err := e.helm.Check(ctx, ns, "app", 1, "", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Summary(drifts), "Deployment/worker (.spec.replicas)"; got != want {
		t.Fatalf("drifts %q, want %q: web's replicas are its autoscaler's", got, want)
	}
	if _, _, err := e.helm.Correct(ctx, d, drifts); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]int32{"web": 3, "worker": 1} {
		dep, err := e.cs.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := *dep.Spec.Replicas; got != want {
			t.Errorf("after the correction %s runs %d replicas; want %d", name, got, want)
		}
	}
	if _, drifts, err = e.helm.Check(ctx, ns, "app", 1, "", nil, d); err != nil || len(drifts) > 0 {
		t.Fatalf("after the correction: drifts %q, %v; want none", Summary(drifts), err)
	}
	e.setImage(t, ns, "web", "nginx:by-hand")
	if _, drifts, err = e.helm.Check(ctx, ns, "app", 1, "", nil, d); err != nil {
		t.Fatal(err)
	}
	if got, want := Summary(drifts), `Deployment/web (.spec.template.spec.containers[name="web"].image)`; got != want {
		t.Fatalf("drifts %q, want %q", got, want)
	}
	if _, _, err := e.helm.Correct(ctx, d, drifts); err != nil {
		t.Fatal(err)
	}
	e.requireWeb(t, ns, 3, "nginx:1.27", "after the correction of its image")
	// The autoscalers are asked for once per takeover, not at each check:
	// until the release changes, web's replicas are not expected back,
	// even with its autoscaler gone.
	if err := e.cs.AutoscalingV2().HorizontalPodAutoscalers(ns).Delete(ctx, "keda-hpa-web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, drifts, err = e.helm.Check(ctx, ns, "app", 1, "", nil, d); err != nil || len(drifts) > 0 {
		t.Fatalf("a check after the takeover was noted: drifts %q, %v; want none (the autoscalers not asked again)", Summary(drifts), err)
	}
}

// TestARewrittenReleaseRecordIsNeitherCheckedNorForced: a release's
// record is a Secret in the deployment's namespace, which whoever may
// write Secrets there can rewrite. A drift check after a restart read
// the manifest of the record and applied what it lacked, forced, as the
// agent: a record rewritten to hold an object in another namespace had
// the agent create it. Now the check compares the record's manifest with
// the digest the agent recorded when it wrote the revision, and a record
// that differs is ErrRecordChanged, nothing applied; and the next apply,
// given that digest, takes none of the record's objects as the
// release's own: an object it lists outside the namespace, owned by no
// release, is refused rather than forced.
func TestARewrittenReleaseRecordIsNeitherCheckedNorForced(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns, shared = "record-rewritten", "record-shared"
	e.namespace(t, ns)
	e.namespace(t, shared)
	r1, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "a", "1")), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	digest := r1.Status(metav1.Now()).ManifestDigest
	if !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("revision 1's manifest digest %q", digest)
	}
	if _, _, err := e.helm.Check(ctx, ns, "app", 1, digest, nil, nil); err != nil {
		t.Fatalf("a drift check of the record as written: %v", err)
	}
	// Someone with the namespace's Secrets rewrites revision 1's record.
	byHand := configMap(shared, "x", "by hand")
	if _, err := e.cs.CoreV1().ConfigMaps(shared).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Data: map[string]string{"v": "by hand"}}, metav1.CreateOptions{FieldManager: "kubectl-create"}); err != nil {
		t.Fatal(err)
	}
	rel, err := e.helm.records.get(ctx, ns, "app", 1)
	if err != nil {
		t.Fatal(err)
	}
	rel.Manifest += "---\n# Source: x/planted.yaml\n" + string(configMap(shared, "planted", "evil").YAML) +
		"---\n# Source: x/x.yaml\n" + string(byHand.YAML)
	if err := e.helm.records.update(ctx, rel); err != nil {
		t.Fatal(err)
	}
	_, drifts, err := e.helm.Check(ctx, ns, "app", 1, digest, nil, nil)
	if !errors.Is(err, ErrRecordChanged) || len(drifts) > 0 {
		t.Fatalf("a drift check of the rewritten record: %v, drifts %q; want ErrRecordChanged and none", err, Summary(drifts))
	}
	if got := e.configMaps(t, shared); strings.Contains(got, "planted") {
		t.Fatalf("the rewritten record's object was created: %s", got)
	}
	// The release written again from the lock, following revision 1: x,
	// which the rewritten record says the release created, is not forced.
	req := releaseReq(ns, configMap(ns, "a", "1"), configMap(shared, "x", "ours"))
	req.PreviousDigest = digest
	_, _, err = e.helm.Apply(ctx, req, nil, 1)
	if ce, ok := errors.AsType[*ConflictError](err); !ok || !ce.Unowned || ce.Object.Name != "x" {
		t.Fatalf("an apply after the rewritten record: %v; want x refused as owned by no release", err)
	}
	cm, err := e.cs.CoreV1().ConfigMaps(shared).Get(ctx, "x", metav1.GetOptions{})
	if err != nil || cm.Data["v"] != "by hand" {
		t.Fatalf("x after the apply: %v (%v); want it as made by hand", cm.Data, err)
	}
}

// TestAReleaseWhoseRecordWasDeletedTakesBackItsObjectsFromTheInventory: a
// release's record deleted by hand (its Secrets) is written again by an
// install that knows none of the live objects as the release's own, so it
// applied them unforced: a field another manager had taken (a kubectl
// scale) failed that install, and every retry, with a conflict, and the
// deployment stayed there. The inventory the agent recorded (its status,
// which only the agent writes) says which objects are the release's: one
// of them whose live annotations name the release is forced back, as a
// deployed revision's are. An object the inventory does not list is still
// refused.
func TestAReleaseWhoseRecordWasDeletedTakesBackItsObjectsFromTheInventory(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "record-deleted"
	e.namespace(t, ns)
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, webDeployment(ns, "nginx:1.27")), nil, 0); err != nil {
		t.Fatal(err)
	}
	e.scaleDeployment(t, ns, "web", 3)
	if err := e.cs.CoreV1().Secrets(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "owner=helm,name=app"}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, webDeployment(ns, "nginx:1.27")), nil, 0); err == nil {
		t.Fatal("an install knowing nothing of the release's objects forced web's replicas back; want a conflict")
	}
	req := releaseReq(ns, webDeployment(ns, "nginx:1.27"))
	req.Inventory = []v1alpha1.ObjectRef{{APIVersion: "apps/v1", Kind: "Deployment", Namespace: ns, Name: "web"}}
	rev, _, err := e.helm.Apply(ctx, req, nil, 0)
	if err != nil {
		t.Fatalf("the install with the agent's inventory: %v", err)
	}
	e.requireWeb(t, ns, 1, "nginx:1.27", "after the install with the agent's inventory")
	if _, err := e.helm.records.get(ctx, ns, "app", rev.Status(metav1.Now()).Revision); err != nil {
		t.Fatalf("the release's record written again: %v", err)
	}
}

// TestAnObjectItsChartLeavesOutOfDriftChecksIsNeitherDriftNorPutBack: an
// object another controller changes by design (cert-manager's CA
// injector fills a webhook's caBundle the chart leaves empty) was put
// back at every drift interval, fighting that controller for ever. Its
// chart can annotate it styrmin.io/drift-detection: disabled: a release
// applies it, no check reports its fields or puts them back, in the
// revision applied and in one kept packed; deleted, it is made again. The
// others are checked as before.
func TestAnObjectItsChartLeavesOutOfDriftChecksIsNeitherDriftNorPutBack(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "drift-disabled"
	e.namespace(t, ns)
	rev, _, err := e.helm.Apply(ctx, releaseReq(ns, configMap(ns, "injected", "", DriftDetectionAnnotation, DriftDetectionDisabled), configMap(ns, "plain", "1")), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"injected", "plain"} {
		cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data["v"] = "by another controller"
		if _, err := e.cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{FieldManager: "cainjector"}); err != nil {
			t.Fatal(err)
		}
	}
	digest := rev.Status(metav1.Now()).ManifestDigest
	d, drifts, err := e.helm.Check(ctx, ns, "app", 1, digest, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := Summary(drifts), "ConfigMap/plain (.data.v)"; got != want {
		t.Fatalf("drifts %q, want %q (injected left out)", got, want)
	}
	if _, _, err := e.helm.Correct(ctx, d, drifts); err != nil {
		t.Fatal(err)
	}
	// Checked again from the kept, packed revision.
	if _, drifts, err = e.helm.Check(ctx, ns, "app", 1, digest, nil, d); err != nil || len(drifts) > 0 {
		t.Fatalf("after the correction: drifts %q, %v; want none", Summary(drifts), err)
	}
	for name, want := range map[string]string{"injected": "by another controller", "plain": "1"} {
		cm, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || cm.Data["v"] != want {
			t.Errorf("%s after the correction: %v (%v); want v=%q", name, cm.Data, err, want)
		}
	}
	// Deleted, it is drift as any object: made again.
	if err := e.cs.CoreV1().ConfigMaps(ns).Delete(ctx, "injected", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, drifts, err = e.helm.Check(ctx, ns, "app", 1, digest, nil, d); err != nil {
		t.Fatal(err)
	}
	if got, want := Summary(drifts), "ConfigMap/injected (deleted)"; got != want {
		t.Fatalf("injected deleted: drifts %q, want %q", got, want)
	}
	if _, _, err := e.helm.Correct(ctx, d, drifts); err != nil {
		t.Fatal(err)
	}
	if _, err := e.cs.CoreV1().ConfigMaps(ns).Get(ctx, "injected", metav1.GetOptions{}); err != nil {
		t.Fatalf("injected after the correction: %v", err)
	}
}

// TestReplicasTakenBackAtTheChartsValueAreNoDrift: the agent's own
// stopComponents and startComponents scale a workload with a patch of
// their own field manager, so after an upgrade that stopped its workers
// and started them again the release no longer owned their replicas, and
// the next check put the chart's value back (the value they had), with a
// warning, on every such deployment. Replicas taken at the value the
// release gives are no drift; a different value still is.
func TestReplicasTakenBackAtTheChartsValueAreNoDrift(t *testing.T) {
	t.Parallel()
	e := startReleaseEnv(t, 10)
	ctx := context.Background()
	const ns = "stopped-started"
	e.namespace(t, ns)
	if _, _, err := e.helm.Apply(ctx, releaseReq(ns, webDeployment(ns, "nginx:1.27")), nil, 0); err != nil {
		t.Fatal(err)
	}
	scale := func(replicas int) {
		t.Helper()
		patch := []byte(fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas))
		if _, err := e.cs.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, patch, metav1.PatchOptions{FieldManager: "styrmin-actions"}); err != nil {
			t.Fatal(err)
		}
	}
	scale(0)
	scale(1)
	d, drifts, err := e.helm.Check(ctx, ns, "app", 1, "", nil, nil)
	if err != nil || len(drifts) > 0 {
		t.Fatalf("after a stop and a start: drifts %q, %v; want none", Summary(drifts), err)
	}
	// A correction of another field leaves them to whoever holds them:
	// scaled out between the check and the correction, they stay so.
	e.setImage(t, ns, "web", "nginx:by-hand")
	if _, drifts, err = e.helm.Check(ctx, ns, "app", 1, "", nil, d); err != nil {
		t.Fatal(err)
	}
	if got, want := Summary(drifts), `Deployment/web (.spec.template.spec.containers[name="web"].image)`; got != want {
		t.Fatalf("the image set by hand: drifts %q, want %q", got, want)
	}
	e.scaleDeployment(t, ns, "web", 4)
	if _, _, err := e.helm.Correct(ctx, d, drifts); err != nil {
		t.Fatal(err)
	}
	e.requireWeb(t, ns, 4, "nginx:1.27", "after the correction of its image")
	e.scaleDeployment(t, ns, "web", 3)
	if _, drifts, err = e.helm.Check(ctx, ns, "app", 1, "", nil, d); err != nil {
		t.Fatal(err)
	}
	if got, want := Summary(drifts), "Deployment/web (.spec.replicas)"; got != want {
		t.Fatalf("scaled to 3 by hand: drifts %q, want %q", got, want)
	}
}
