package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
	release "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/internal/helmtest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	agentrelease "github.com/styrmin/styrmin/operator/release"
)

// TestHelmReadsAndUninstallsWhatTheAgentWroteAndTheAgentWritesItAgain
// pins Helm compatibility with Helm's own actions (the SDK the helm CLI
// runs, configured from a kubeconfig as the CLI is): `helm list`,
// `status`, `get manifest` and `history` read the agent's release; `helm
// uninstall` removes its objects and records, and the agent puts the
// objects back and writes the release again as a new revision, with a
// ReleaseRecordMissing event, so `helm list` shows it again. A record
// deleted by hand while the objects stay is noticed the same way.
func TestHelmReadsAndUninstallsWhatTheAgentWroteAndTheAgentWritesItAgain(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	in := e.instance(t, "local", "dev", "web", 1)
	ns, name := in.Context.Deployment.Namespace, in.ID.Name
	e.write(t, ns, in)
	e.waitApplied(t, ns, 1)
	cfg := helmtest.CLIConfig(t, e.cluster.KubeconfigPath, ns)

	list := func() []*release.Release {
		t.Helper()
		l := action.NewList(cfg)
		l.SetStateMask()
		rels, err := l.Run()
		if err != nil {
			t.Fatalf("helm list: %v", err)
		}
		var out []*release.Release
		for _, r := range rels {
			out = append(out, r.(*release.Release))
		}
		return out
	}
	if rels := list(); len(rels) != 1 || rels[0].Name != name || rels[0].Info.Status != "deployed" || rels[0].Version != 1 {
		t.Fatalf("helm list: %v, want %s revision 1 deployed", rels, name)
	}
	st, err := action.NewStatus(cfg).Run(name)
	if err != nil {
		t.Fatalf("helm status: %v", err)
	}
	if r := st.(*release.Release); r.Info.Status != "deployed" || r.Chart.Metadata.Name != in.Driver.Name {
		t.Errorf("helm status: %s, chart %s; want deployed, chart %s", r.Info.Status, r.Chart.Metadata.Name, in.Driver.Name)
	}
	got, err := action.NewGet(cfg).Run(name)
	if err != nil {
		t.Fatalf("helm get manifest: %v", err)
	}
	if m := got.(*release.Release).Manifest; !strings.Contains(m, "kind: Deployment") || !strings.Contains(m, "name: web") {
		t.Errorf("helm get manifest:\n%s", m)
	}
	// The digest of what the agent wrote, against which a drift check
	// after a restart trusts the record.
	if sd := e.waitApplied(t, ns, 1); sd.Status.Release == nil || sd.Status.Release.ManifestDigest != agentrelease.ManifestDigest(got.(*release.Release).Manifest) {
		t.Errorf("status.release %+v; want the manifest's digest %s", sd.Status.Release, agentrelease.ManifestDigest(got.(*release.Release).Manifest))
	}

	// The release is written again: a record of a deployed revision that
	// is not the one removed (gone: its UID), and the Deployment back.
	recordUID := func(ctx context.Context) (types.UID, string, error) {
		hist := e.history(t, ns, name)
		if len(hist) == 0 || hist[len(hist)-1].Info.Status != "deployed" {
			return "", "helm history " + revisions(hist), nil
		}
		var sec corev1.Secret
		key := fmt.Sprintf("sh.helm.release.v1.%s.v%d", name, hist[len(hist)-1].Version)
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: key}, &sec); err != nil {
			return "", key + ": " + err.Error(), client.IgnoreNotFound(err)
		}
		return sec.UID, "", nil
	}
	waitRewritten := func(gone types.UID) {
		t.Helper()
		agenttest.WaitUntil(t, 60*time.Second, "the release written again and its Deployment back", func(ctx context.Context) (bool, string, error) {
			var d appsv1.Deployment
			if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web"}, &d); err != nil {
				return false, "Deployment web: " + err.Error(), client.IgnoreNotFound(err)
			}
			uid, why, err := recordUID(ctx)
			if uid == "" || uid == gone {
				return false, why + " (the removed record)", err
			}
			return true, "", nil
		})
	}
	first, _, err := recordUID(ctx)
	if err != nil || first == "" {
		t.Fatalf("the first record: %v", err)
	}
	t.Log("helm uninstall: the agent writes the release again")
	u := action.NewUninstall(cfg)
	u.WaitStrategy, u.DeletionPropagation = kube.HookOnlyStrategy, "background" // the helm CLI's defaults
	if _, err := u.Run(name); err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	waitRewritten(first)
	if rels := list(); len(rels) != 1 || rels[0].Name != name || rels[0].Info.Status != "deployed" {
		t.Fatalf("helm list after the agent wrote the release again: %v", rels)
	}
	if evs := e.events(t, ns, v1alpha1.EventReleaseRecordMissing); len(evs) == 0 || !strings.Contains(evs[0].Note, "helm uninstall") {
		t.Errorf("events %v, want a %s event saying why the release is written again", evs, v1alpha1.EventReleaseRecordMissing)
	}

	t.Log("a record deleted by hand, the objects left alone")
	var sd v1alpha1.StyrminDeployment
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &sd); err != nil {
		t.Fatal(err)
	}
	second, _, err := recordUID(ctx)
	if err != nil || second == "" {
		t.Fatalf("the rewritten record: %v", err)
	}
	key := fmt.Sprintf("sh.helm.release.v1.%s.v%d", name, sd.Status.Release.Revision)
	if err := e.client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: key}}); err != nil {
		t.Fatal(err)
	}
	waitRewritten(second)
	// A repeated event may be one Event with a series.
	n := 0
	for _, ev := range e.events(t, ns, v1alpha1.EventReleaseRecordMissing) {
		n += max(1, int(ev.DeprecatedCount))
		if ev.Series != nil {
			n += int(ev.Series.Count) - 1
		}
	}
	if n < 2 {
		t.Errorf("%d %s events, want one for each record removed", n, v1alpha1.EventReleaseRecordMissing)
	}
}
