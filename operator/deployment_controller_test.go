package operator_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"helm.sh/helm/v4/pkg/action"
	release "helm.sh/helm/v4/pkg/release/v1"
	releaseutil "helm.sh/helm/v4/pkg/release/v1/util"
	"helm.sh/helm/v4/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	applyappsv1 "k8s.io/client-go/applyconfigurations/apps/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/internal/helmtest"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/driversource"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/testcluster"
)

// driftInterval is short so the drift tests run in seconds.
const driftInterval = 2 * time.Second

// env is a running control plane with the CRDs installed and the agent's
// manager started in the test process.
type env struct {
	cluster   *testcluster.Cluster
	client    client.Client
	clientset *kubernetes.Clientset
	workspace *resolver.Workspace
	// claims are the StyrminDeployment controller's, for a task
	// controller a test builds beside it.
	claims *instance.ActiveClaims
}

func startEnv(t *testing.T) *env {
	t.Helper()
	return startEnvWith(t)
}

// startEnvWith is startEnv with more drivers in the agent's catalog than
// the examples'.
func startEnvWith(t *testing.T, extra ...*drivers.Driver) *env {
	t.Helper()
	return startEnvWithOptions(t, nil, extra...)
}

// startEnvWithOptions is startEnvWith with the manager's options changed
// by edit (nil: none).
func startEnvWithOptions(t *testing.T, edit func(*operator.ManagerOptions), extra ...*drivers.Driver) *env {
	t.Helper()
	return startEnvWrapped(t, nil, edit, extra...)
}

// startEnvWrapped is startEnvWithOptions with the agent's transport
// wrapped by wrap (nil: not), to count or hold its requests.
func startEnvWrapped(t *testing.T, wrap func(http.RoundTripper) http.RoundTripper, edit func(*operator.ManagerOptions), extra ...*drivers.Driver) *env {
	t.Helper()
	c, cl := agenttest.StartCluster(t, testcluster.Options{Workloads: true, Nodes: 2})
	ctx, cancel := context.WithCancel(context.Background())
	// The agent runs as its service account with the manifests' RBAC, so
	// the test fails when the role lacks a permission the agent uses.
	agenttest.Apply(t, cl, "test", append([][]byte{config.Namespace()}, config.RBAC()...))
	agentCfg := rest.CopyConfig(c.RESTConfig)
	agentCfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + config.AgentNamespace + ":" + config.AgentServiceAccount,
	}
	if wrap != nil {
		agentCfg.Wrap(wrap)
	}
	ws, err := resolver.LoadWorkspace(os.DirFS("../examples"), resolver.WorkspaceOptions{SourceCommit: "0123456789abcdef0123456789abcdef01234567"})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range extra {
		if err := ws.Catalog.Add(d); err != nil {
			t.Fatal(err)
		}
	}
	claims := instance.NewActiveClaims()
	opts := operator.ManagerOptions{
		Drivers:        &driversource.CatalogSource{Catalog: ws.Catalog},
		ActiveClaims:   claims,
		DriftInterval:  driftInterval,
		Namespace:      config.AgentNamespace,
		LeaderElection: true,
		Logger:         testr.NewWithOptions(t, testr.Options{Verbosity: 0}),
	}
	if edit != nil {
		edit(&opts)
	}
	mgr, err := operator.NewManager(agentCfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	select {
	case <-mgr.Elected():
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not become leader")
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig)
	if err != nil {
		t.Fatal(err)
	}
	return &env{cluster: c, client: cl, clientset: cs, workspace: ws, claims: claims}
}

// createTask makes the task of in's sequence in its deployment's
// namespace, as the sync would, carrying a copy of the instance (no lock
// to read), with workflow wf.
func (e *env) createTask(t *testing.T, in *resolver.Instance, wf v1alpha1.Workflow) *v1alpha1.StyrminTask {
	t.Helper()
	spec, err := instance.SpecFromInstance(in)
	if err != nil {
		t.Fatal(err)
	}
	ns := in.Context.Deployment.Namespace
	id := instance.DeploymentID(in.ID)
	task := &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{Name: v1alpha1.TaskName(in.ID.Name, in.Sequence), Namespace: ns, Labels: id.Labels()},
		Spec: v1alpha1.StyrminTaskSpec{Deployment: id, Namespace: ns, Workflow: wf,
			ToSequence: in.Sequence, Lock: v1alpha1.LockRef{Commit: in.SourceCommit, Path: in.ID.LockPath()}, Instance: &spec},
	}
	if err := e.client.Create(context.Background(), task); err != nil {
		t.Fatal(err)
	}
	return task
}

// instance resolves an example deployment and gives it a sequence.
func (e *env) instance(t *testing.T, cluster, environment, name string, seq int64) *resolver.Instance {
	t.Helper()
	id := resolver.ID{Cluster: cluster, Environment: environment, Name: name}
	res := e.workspace.Resolve()
	r, ok := res.Get(id)
	if !ok {
		t.Fatalf("example %s does not resolve: %v", id, res.Err())
	}
	in := *r.Instance
	in.Sequence = seq
	return &in
}

// withMessage returns a copy of in whose message parameter is msg: a
// configuration-only change, as the resolver would produce it.
func withMessage(t *testing.T, in *resolver.Instance, seq int64, msg string) *resolver.Instance {
	t.Helper()
	out := *in
	out.Sequence = seq
	ctx := *in.Context
	ctx.Parameters = clone(in.Context.Parameters)
	ctx.Parameters["message"] = msg
	out.Context = &ctx
	out.Values = clone(in.Values)
	out.Values["message"] = msg
	d, err := out.ComputeDigest()
	if err != nil {
		t.Fatal(err)
	}
	out.Digest = d
	return &out
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (e *env) write(t *testing.T, ns string, in *resolver.Instance) instance.WriteOutcome {
	t.Helper()
	out, err := instance.WriteInstance(context.Background(), e.client, ns, in)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *env) waitApplied(t *testing.T, ns string, seq int64) *v1alpha1.StyrminDeployment {
	t.Helper()
	var sd v1alpha1.StyrminDeployment
	agenttest.WaitUntil(t, 60*time.Second, fmt.Sprintf("%s to run sequence %d and be Ready", ns, seq), func(ctx context.Context) (bool, string, error) {
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &sd); err != nil {
			return false, err.Error(), nil
		}
		ok, err := instance.Applied(&sd, seq)
		return ok, fmt.Sprintf("active %d, conditions %v", sd.Status.ActiveSequence, sd.Status.Conditions), err
	})
	return &sd
}

func (e *env) history(t *testing.T, ns, name string) []*release.Release {
	t.Helper()
	h := action.NewHistory(helmtest.CLIConfig(t, e.cluster.KubeconfigPath, ns))
	rels, err := h.Run(name)
	if err != nil {
		if strings.Contains(err.Error(), driver.ErrReleaseNotFound.Error()) {
			return nil
		}
		t.Fatalf("helm history %s/%s: %v", ns, name, err)
	}
	var out []*release.Release
	for _, r := range rels {
		out = append(out, r.(*release.Release))
	}
	slices.SortFunc(out, func(a, b *release.Release) int { return a.Version - b.Version })
	return out
}

func revisions(rels []*release.Release) string {
	var parts []string
	for _, r := range rels {
		parts = append(parts, fmt.Sprintf("%d:%s", r.Version, r.Info.Status))
	}
	return strings.Join(parts, " ")
}

// manifestObjects parses a release manifest or rendered stream into
// objects keyed by kind/name, so two renderings compare as data.
func manifestObjects(t *testing.T, manifest string) map[string]map[string]any {
	t.Helper()
	out := map[string]map[string]any{}
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		if len(m) == 0 {
			continue
		}
		md := m["metadata"].(map[string]any)
		out[fmt.Sprintf("%s/%s", m["kind"], md["name"])] = m
	}
	return out
}

// renderExample renders an instance with the catalog's driver.
func (e *env) renderExample(t *testing.T, in *resolver.Instance) *drivers.Manifests {
	t.Helper()
	d, ok := e.workspace.Catalog.Get(in.Driver.Name, in.Driver.Version)
	if !ok {
		t.Fatalf("driver %s@%s not in the examples", in.Driver.Name, in.Driver.Version)
	}
	m, err := d.Render(*in.Context, in.Values)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func (e *env) events(t *testing.T, ns, reason string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := e.client.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, ev := range list.Items {
		if ev.Reason == reason && ev.Regarding.Kind == "StyrminDeployment" {
			out = append(out, ev)
		}
	}
	return out
}

// driftChecks reads the agent's drift-check counter for a result.
func driftChecks(t *testing.T, result string) float64 {
	t.Helper()
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "styrmin_drift_checks_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestDeploymentLifecycle walks one deployment of the webapp example
// through create, update, drift (scaled workload, edited ConfigMap), a
// field of another manager, and its tombstone, on a real control plane.
func TestDeploymentLifecycle(t *testing.T) {
	// Not parallel: driftChecks reads the process-wide metrics registry,
	// which every in-process manager's drift checks count in.
	e := startEnv(t)
	ctx := context.Background()
	in1 := e.instance(t, "local", "dev", "web", 1)
	ns := in1.Context.Deployment.Namespace
	name := in1.ID.Name

	t.Log("create: sequence 1 becomes Helm release revision 1, pods Ready")
	if out := e.write(t, ns, in1); !out.Written {
		t.Fatalf("first write not written: %+v", out)
	}
	sd := e.waitApplied(t, ns, 1)
	if sd.Status.Release == nil || sd.Status.Release.Revision != 1 || sd.Status.Release.Name != name {
		t.Fatalf("status.release = %+v, want %s revision 1", sd.Status.Release, name)
	}
	if len(sd.Status.Components) != 1 || sd.Status.Components[0].Name != "web" || !sd.Status.Components[0].Ready ||
		sd.Status.Components[0].ReadyReplicas != 2 || sd.Status.Components[0].DesiredReplicas != 2 {
		t.Fatalf("status.components = %+v, want web 2/2 ready", sd.Status.Components)
	}
	if got := revisions(e.history(t, ns, name)); got != "1:deployed" {
		t.Fatalf("helm history = %q, want 1:deployed", got)
	}
	var pods corev1.PodList
	if err := e.client.List(ctx, &pods, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	ready := 0
	for _, p := range pods.Items {
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
				ready++
			}
		}
	}
	if ready != 2 {
		t.Fatalf("%d ready pods in %s, want 2", ready, ns)
	}
	// The release's manifest is exactly what the driver renders.
	rel := e.history(t, ns, name)[0]
	want := manifestObjects(t, string(e.renderExample(t, in1).YAML()))
	if got := manifestObjects(t, rel.Manifest); !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("release manifest differs from drivers.Render:\n got %v\nwant %v", got, want)
	}
	if len(sd.Status.Inventory) != len(want) {
		t.Fatalf("inventory %v, want %d objects", sd.Status.Inventory, len(want))
	}

	t.Log("update: sequence 2 (new message) becomes revision 2")
	in2 := withMessage(t, in1, 2, "Hello again")
	e.write(t, ns, in2)
	sd = e.waitApplied(t, ns, 2)
	if got := revisions(e.history(t, ns, name)); got != "1:superseded 2:deployed" {
		t.Fatalf("helm history = %q, want 1:superseded 2:deployed", got)
	}
	cmName := name + "-content"
	var cm corev1.ConfigMap
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cmName}, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Data["message"] != "Hello again" {
		t.Fatalf("ConfigMap message = %q after the update", cm.Data["message"])
	}

	t.Log("guard: an older sequence does not replace a newer one")
	if out := e.write(t, ns, in1); out.Written || out.Kept != 2 {
		t.Fatalf("writing sequence 1 over 2: %+v, want kept 2", out)
	}

	t.Log("drift: scale the Deployment, edit the ConfigMap and delete the Service by hand")
	scale := &autoscalingv1.Scale{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: autoscalingv1.ScaleSpec{Replicas: 5}}
	if _, err := e.clientset.AppsV1().Deployments(ns).UpdateScale(ctx, name, scale, metav1.UpdateOptions{FieldManager: "kubectl-scale"}); err != nil {
		t.Fatal(err)
	}
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cmName}, &cm); err != nil {
		t.Fatal(err)
	}
	cm.Data["message"] = "edited by hand"
	if err := e.client.Update(ctx, &cm, client.FieldOwner("kubectl-edit")); err != nil {
		t.Fatal(err)
	}
	if err := e.client.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 10*driftInterval, "drift to be put back", func(ctx context.Context) (bool, string, error) {
		var svc corev1.Service
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &svc); apierrors.IsNotFound(err) {
			return false, "service still deleted", nil
		} else if err != nil {
			return false, "", err
		}
		var d appsv1.Deployment
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
			return false, "", err
		}
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: cmName}, &cm); err != nil {
			return false, "", err
		}
		return *d.Spec.Replicas == 2 && cm.Data["message"] == "Hello again",
			fmt.Sprintf("replicas %d, message %q", *d.Spec.Replicas, cm.Data["message"]), nil
	})
	var evs []eventsv1.Event
	agenttest.WaitUntil(t, 10*time.Second, "a DriftCorrected event", func(context.Context) (bool, string, error) {
		evs = e.events(t, ns, v1alpha1.ReasonDriftCorrected)
		var notes []string
		for _, ev := range evs {
			notes = append(notes, ev.Note)
		}
		all := strings.Join(notes, "\n")
		return strings.Contains(all, ".spec.replicas") && strings.Contains(all, ".data.message") &&
			strings.Contains(all, "Service/"+name+" (deleted)"), all, nil
	})
	e.waitApplied(t, ns, 2)
	// The status patch ends the reconcile that corrected, after its event
	// was handed to the broadcaster, and a correction may take two
	// reconciles: a clean check since (Drifted's reason back to NoDrift)
	// says the count is final, the baseline below.
	agenttest.WaitUntil(t, 10*driftInterval, "the drift correction counted and a clean check since", func(ctx context.Context) (bool, string, error) {
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, sd); err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionDrifted)
		return sd.Status.LastDriftCorrection != nil && sd.Status.DriftCorrections > 0 && c != nil && c.Reason == v1alpha1.ReasonNoDrift,
			fmt.Sprintf("corrections %d, Drifted %+v", sd.Status.DriftCorrections, c), nil
	})
	if got := revisions(e.history(t, ns, name)); got != "1:superseded 2:deployed" {
		t.Fatalf("drift correction changed the release history: %q", got)
	}

	t.Log("another manager's field is left alone")
	corrections := sd.Status.DriftCorrections
	eventsBefore := len(e.events(t, ns, v1alpha1.ReasonDriftCorrected))
	ac := applyappsv1.Deployment(name, ns).WithAnnotations(map[string]string{"example.com/owner": "team-a"})
	if _, err := e.clientset.AppsV1().Deployments(ns).Apply(ctx, ac, metav1.ApplyOptions{FieldManager: "other-tool"}); err != nil {
		t.Fatal(err)
	}
	checks := driftChecks(t, "clean")
	agenttest.WaitUntil(t, 10*driftInterval, "two clean drift checks", func(context.Context) (bool, string, error) {
		got := driftChecks(t, "clean")
		return got >= checks+2, fmt.Sprintf("%v clean checks since", got-checks), nil
	})
	var d appsv1.Deployment
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &d); err != nil {
		t.Fatal(err)
	}
	if d.Annotations["example.com/owner"] != "team-a" {
		t.Fatalf("the other manager's annotation was removed: %v", d.Annotations)
	}
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, sd); err != nil {
		t.Fatal(err)
	}
	if sd.Status.DriftCorrections != corrections || len(e.events(t, ns, v1alpha1.ReasonDriftCorrected)) != eventsBefore {
		t.Fatalf("a field of another manager counted as drift: corrections %d → %d", corrections, sd.Status.DriftCorrections)
	}
	if c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionDrifted); c == nil || c.Status != metav1.ConditionFalse {
		t.Fatalf("Drifted = %+v, want False", c)
	}

	t.Log("tombstone: the release is uninstalled and the objects are gone")
	tomb := &resolver.Instance{APIVersion: resolver.APIVersion, Kind: resolver.KindTombstone, ID: in1.ID, Sequence: 3}
	if tomb.Digest, _ = tomb.ComputeDigest(); tomb.Digest == "" {
		t.Fatal("no digest")
	}
	if out := e.write(t, ns, tomb); !out.Written {
		t.Fatalf("tombstone not written: %+v", out)
	}
	agenttest.WaitUntil(t, 30*time.Second, "the StyrminDeployment and the release's objects to be gone", func(ctx context.Context) (bool, string, error) {
		var left []string
		for _, o := range []client.Object{&v1alpha1.StyrminDeployment{}, &appsv1.Deployment{}, &corev1.Service{}, &corev1.ConfigMap{}} {
			key := client.ObjectKey{Namespace: ns, Name: name}
			switch o.(type) {
			case *v1alpha1.StyrminDeployment:
				key.Name = ns
			case *corev1.ConfigMap:
				key.Name = cmName
			}
			err := e.client.Get(ctx, key, o)
			if err == nil {
				left = append(left, fmt.Sprintf("%T %s", o, key.Name))
			} else if !apierrors.IsNotFound(err) {
				return false, "", err
			}
		}
		return len(left) == 0, strings.Join(left, ", "), nil
	})
	if got := e.history(t, ns, name); len(got) != 0 {
		t.Fatalf("helm history after the tombstone = %q, want no release", revisions(got))
	}
	var secrets corev1.SecretList
	if err := e.client.List(ctx, &secrets, client.InNamespace(ns), client.MatchingLabels{"owner": "helm"}); err != nil {
		t.Fatal(err)
	}
	if len(secrets.Items) != 0 {
		t.Fatalf("%d Helm release secrets left", len(secrets.Items))
	}
}

// TestStalledUntilGitChanges pins the error classes: an instance whose
// driver version does not exist stalls (Stalled True, not retried, and
// Applied says so), and the next instance from git recovers.
func TestStalledUntilGitChanges(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	good := e.instance(t, "local", "staging", "web", 2)
	ns := good.Context.Deployment.Namespace

	bad := *good
	bad.Sequence = 1
	bad.Driver.Version = "9.9.9"
	bad.Digest, _ = bad.ComputeDigest()
	e.write(t, ns, &bad)
	var sd v1alpha1.StyrminDeployment
	agenttest.WaitUntil(t, 30*time.Second, "the StyrminDeployment to stall", func(ctx context.Context) (bool, string, error) {
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &sd); err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionStalled)
		return c != nil && c.Status == metav1.ConditionTrue, fmt.Sprintf("%v", sd.Status.Conditions), nil
	})
	for typ, want := range map[string]struct {
		status metav1.ConditionStatus
		reason string
	}{
		v1alpha1.ConditionStalled:     {metav1.ConditionTrue, v1alpha1.ReasonDriverNotFound},
		v1alpha1.ConditionReady:       {metav1.ConditionFalse, v1alpha1.ReasonDriverNotFound},
		v1alpha1.ConditionReconciling: {metav1.ConditionFalse, v1alpha1.ReasonDriverNotFound},
	} {
		c := apimeta.FindStatusCondition(sd.Status.Conditions, typ)
		if c == nil || c.Status != want.status || c.Reason != want.reason {
			t.Errorf("%s = %+v, want %s/%s", typ, c, want.status, want.reason)
		}
	}
	if c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionStalled); !strings.Contains(c.Message, "webapp@9.9.9") {
		t.Errorf("Stalled message does not name the driver: %q", c.Message)
	}
	if _, err := instance.Applied(&sd, 1); !errors.Is(err, instance.ErrStalled) {
		t.Fatalf("Applied on a stalled deployment: %v, want ErrStalled", err)
	}
	if sd.Status.Release != nil {
		t.Fatalf("a stalled instance installed a release: %+v", sd.Status.Release)
	}

	t.Log("the next instance from git recovers")
	e.write(t, ns, good)
	sd = *e.waitApplied(t, ns, 2)
	if c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionStalled); c.Status != metav1.ConditionFalse {
		t.Fatalf("still stalled: %+v", c)
	}

	t.Log("deleting the StyrminDeployment by hand uninstalls the release first")
	if err := e.client.Delete(context.Background(), &sd); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 30*time.Second, "the StyrminDeployment and its Deployment to be gone", func(ctx context.Context) (bool, string, error) {
		errSD := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &v1alpha1.StyrminDeployment{})
		errD := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: good.ID.Name}, &appsv1.Deployment{})
		return apierrors.IsNotFound(errSD) && apierrors.IsNotFound(errD), fmt.Sprintf("%v / %v", errSD, errD), nil
	})
	if got := e.history(t, ns, good.ID.Name); len(got) != 0 {
		t.Fatalf("helm history after deletion = %q", revisions(got))
	}
}

// TestARevertAfterAPartlyAppliedFailedChangeIsAppliedAgain pins what a
// revert does after a change that failed halfway: the change's ConfigMap
// was applied before the API server refused its Deployment, so the
// cluster no longer runs the previous instance, and the same content
// locked again (a new sequence, the previous digest) is applied again as a
// new deployed revision rather than taken as running and shown Ready.
func TestARevertAfterAPartlyAppliedFailedChangeIsAppliedAgain(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	good := e.instance(t, "local", "staging", "web", 1)
	ns, name := good.Context.Deployment.Namespace, good.ID.Name
	e.write(t, ns, good)
	e.waitApplied(t, ns, 1)
	message := func(ctx context.Context) (string, error) {
		var cm corev1.ConfigMap
		err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name + "-content"}, &cm)
		return cm.Data["message"], err
	}
	before, err := message(context.Background())
	if err != nil {
		t.Fatal(err)
	}

	broken := *good
	broken.Sequence = 2
	broken.Values = maps.Clone(good.Values)
	broken.Values["message"] = "half of a broken change"
	broken.Values["replicaCount"] = -1 // the API server refuses the Deployment
	broken.Digest, _ = broken.ComputeDigest()
	e.write(t, ns, &broken)
	agenttest.WaitUntil(t, 60*time.Second, "the broken change's ConfigMap applied and its Deployment refused", func(ctx context.Context) (bool, string, error) {
		var sd v1alpha1.StyrminDeployment
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &sd); err != nil {
			return false, err.Error(), nil
		}
		got, err := message(ctx)
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionStalled)
		stalled := c != nil && c.Status == metav1.ConditionTrue && c.Reason == v1alpha1.ReasonApplyFailed
		return err == nil && got == "half of a broken change" && stalled, fmt.Sprintf("message %q (%v), conditions %v", got, err, sd.Status.Conditions), nil
	})

	revert := *good
	revert.Sequence = 3
	e.write(t, ns, &revert)
	sd := e.waitApplied(t, ns, 3)
	got, err := message(context.Background())
	if err != nil || got != before {
		t.Fatalf("after the revert the ConfigMap says %q (%v), want the first instance's %q", got, err, before)
	}
	if sd.Status.AppliedDigest != good.Digest || sd.Status.Release == nil || sd.Status.Release.Status != "deployed" {
		t.Fatalf("after the revert: applied digest %s, release %+v; want %s deployed", sd.Status.AppliedDigest, sd.Status.Release, good.Digest)
	}
	hist := e.history(t, ns, name)
	if last := hist[len(hist)-1]; last.Info.Status != "deployed" || last.Version != sd.Status.Release.Revision {
		t.Fatalf("helm history after the revert: %q, want the status's revision %d last and deployed", revisions(hist), sd.Status.Release.Revision)
	}
}
