package operator_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator"
)

const (
	ingressCluster = `domain:       "local.styrmin.dev"
ingressClass: "nginx"
ingress: driver: "ingress-nginx"
`
	// ingressController is the Deployment of the example ingress driver.
	ingressController = "ingress-nginx-controller"
)

// ingressApps are the applications of the test: two per environment.
var ingressApps = []struct{ env, name string }{{"dev", "api"}, {"dev", "web"}, {"staging", "api"}, {"staging", "web"}}

// ingressRepo is a cluster with the example ingress driver as its
// ingress controller and two environments of two webapp deployments each,
// their Ingress enabled.
func ingressRepo() fstest.MapFS {
	webapp := []byte("driver: \"webapp\"\nappVersion: \"1.25.0\"\nparameters: ingress: true\n")
	repo := fstest.MapFS{
		"clusters/local/cluster.cue":                          {Data: []byte(ingressCluster), Mode: 0o644},
		"clusters/local/environments/dev/deployments/hub.cue": nil,
		"clusters/local/environments/staging/environment.cue": {Data: []byte("namespacePrefix: \"staging\"\n"), Mode: 0o644},
	}
	for _, a := range ingressApps {
		repo["clusters/local/environments/"+a.env+"/deployments/"+a.name+".cue"] = &fstest.MapFile{Data: webapp, Mode: 0o644}
	}
	return repo
}

// watchEvent is one event of the ordered watch: an Ingress's class, or
// the readiness (or deletion) of an ingress controller's Deployment, at
// the resourceVersion etcd gave it, which orders events of every kind.
type watchEvent struct {
	rv        int64
	kind      string // "Ingress" or "Deployment"
	namespace string
	name      string
	deleted   bool
	class     string // an Ingress's spec.ingressClassName
	ready     bool   // a Deployment with all of its replicas ready
}

func (ev watchEvent) String() string {
	switch {
	case ev.deleted:
		return fmt.Sprintf("%d %s %s/%s deleted", ev.rv, ev.kind, ev.namespace, ev.name)
	case ev.kind == "Ingress":
		return fmt.Sprintf("%d Ingress %s/%s class %s", ev.rv, ev.namespace, ev.name, ev.class)
	}
	return fmt.Sprintf("%d Deployment %s/%s ready %t", ev.rv, ev.namespace, ev.name, ev.ready)
}

// orderedWatch records the Ingresses and the ingress controllers'
// Deployments of the cluster from a list's resourceVersion on, so no
// event is missed and their order is etcd's.
type orderedWatch struct {
	mu     sync.Mutex
	events []watchEvent
	stop   context.CancelFunc
	done   sync.WaitGroup
}

func startOrderedWatch(t *testing.T, e *agentEnv) *orderedWatch {
	t.Helper()
	scheme, err := operator.NewScheme()
	if err != nil {
		t.Fatal(err)
	}
	wc, err := client.NewWithWatch(e.cluster.RESTConfig, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &orderedWatch{stop: cancel}
	t.Cleanup(w.close)
	var ings networkingv1.IngressList
	if err := wc.List(ctx, &ings); err != nil {
		t.Fatal(err)
	}
	for i := range ings.Items {
		w.add(ingressEvent(&ings.Items[i], false))
	}
	var deps appsv1.DeploymentList
	if err := wc.List(ctx, &deps); err != nil {
		t.Fatal(err)
	}
	for i := range deps.Items {
		if deps.Items[i].Name == ingressController {
			w.add(deploymentEvent(&deps.Items[i], false))
		}
	}
	for _, list := range []client.ObjectList{&networkingv1.IngressList{}, &appsv1.DeploymentList{}} {
		rv := ings.ResourceVersion
		if _, ok := list.(*appsv1.DeploymentList); ok {
			rv = deps.ResourceVersion
		}
		wi, err := wc.Watch(ctx, list, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: rv}})
		if err != nil {
			t.Fatal(err)
		}
		w.done.Add(1)
		go func() {
			defer w.done.Done()
			defer wi.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-wi.ResultChan():
					if !ok {
						if ctx.Err() == nil {
							t.Errorf("the ordered watch of %T ended early", list)
						}
						return
					}
					deleted := ev.Type == watch.Deleted
					switch o := ev.Object.(type) {
					case *networkingv1.Ingress:
						w.add(ingressEvent(o, deleted))
					case *appsv1.Deployment:
						if o.Name == ingressController {
							w.add(deploymentEvent(o, deleted))
						}
					}
				}
			}
		}()
	}
	return w
}

func (w *orderedWatch) add(ev watchEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, ev)
}

func (w *orderedWatch) close() {
	w.stop()
	w.done.Wait()
}

// ordered returns the events so far in etcd's order.
func (w *orderedWatch) ordered() []watchEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := slices.Clone(w.events)
	slices.SortStableFunc(out, func(a, b watchEvent) int { return int(a.rv - b.rv) })
	return slices.CompactFunc(out, func(a, b watchEvent) bool { return a == b })
}

func etcdRevision(o metav1.Object) int64 {
	rv, _ := strconv.ParseInt(o.GetResourceVersion(), 10, 64)
	return rv
}

func ingressEvent(o *networkingv1.Ingress, deleted bool) watchEvent {
	ev := watchEvent{rv: etcdRevision(o), kind: "Ingress", namespace: o.Namespace, name: o.Name, deleted: deleted}
	if o.Spec.IngressClassName != nil {
		ev.class = *o.Spec.IngressClassName
	}
	return ev
}

func deploymentEvent(o *appsv1.Deployment, deleted bool) watchEvent {
	want := int32(1)
	if o.Spec.Replicas != nil {
		want = *o.Spec.Replicas
	}
	ready := o.Status.ObservedGeneration >= o.Generation && o.Status.ReadyReplicas >= want && want > 0
	return watchEvent{rv: etcdRevision(o), kind: "Deployment", namespace: o.Namespace, name: o.Name, deleted: deleted, ready: ready}
}

// controllerClass maps an ingress controller's namespace to the class it
// serves.
var controllerClass = map[string]string{"styrmin-ingress": "nginx", "dev-styrmin-ingress": "dev-nginx", "staging-styrmin-ingress": "staging-nginx"}

// replayViolations replays the events in order and returns every moment
// an Ingress pointed at a class whose controller was not ready, and every
// deletion of a controller while an Ingress still used its class.
func replayViolations(events []watchEvent) []string {
	ready := map[string]bool{}     // class → its controller is ready
	classOf := map[string]string{} // ingress → class
	var out []string
	for _, ev := range events {
		key := ev.namespace + "/" + ev.name
		switch {
		case ev.kind == "Deployment":
			class := controllerClass[ev.namespace]
			ready[class] = ev.ready && !ev.deleted
			if !ev.deleted {
				continue
			}
			for ing, c := range classOf {
				if c == class {
					out = append(out, fmt.Sprintf("%s: the controller of %s is deleted while Ingress %s uses it", ev, class, ing))
				}
			}
		case ev.deleted:
			delete(classOf, key)
		default:
			classOf[key] = ev.class
			if !ready[ev.class] {
				out = append(out, fmt.Sprintf("%s: no ready controller serves class %s", ev, ev.class))
			}
		}
	}
	return out
}

// TestDedicatedIngressOnThenOffOrdersAroundEachEnvironmentsController
// turns dedicated ingress on and then off for a cluster of two
// environments with two applications each, on the local control plane,
// and watches Ingresses and the controllers' Deployments in etcd's order:
// on, every application's Ingress moves to its environment's class only
// after that environment's controller is Ready; off, they move back to
// the shared class, and each environment's controller is deleted only
// after no Ingress uses its class. The shared controller serves
// throughout, and the internal deployments are marked on their
// StyrminDeployments.
func TestDedicatedIngressOnThenOffOrdersAroundEachEnvironmentsController(t *testing.T) {
	t.Parallel()
	e := startAgentEnvWith(t, ingressRepo())
	// The lock's sequences by name: both environments' apps and
	// controllers share names.
	if locked := e.lock(t); !maps.Equal(locked, map[string]int64{"styrmin.ingress": 1, "api": 1, "web": 1}) {
		t.Fatalf("the first lock locked %v, want the shared controller and four applications at 1", locked)
	}
	e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, "styrmin-ingress", "styrmin.ingress", 1))
	for _, a := range ingressApps {
		requireSucceeded(t, e.waitTask(t, a.env+"-"+a.name, a.name, 1))
	}
	if sd := e.deployment(t, "styrmin-ingress"); sd == nil || sd.Spec.Internal != "ingress" {
		t.Fatalf("the shared controller's StyrminDeployment: %+v, want spec.internal ingress", sd)
	}
	var class networkingv1.IngressClass
	if err := e.c.Get(context.Background(), client.ObjectKey{Name: "nginx"}, &class); err != nil {
		t.Fatalf("the shared controller's IngressClass: %v", err)
	}
	w := startOrderedWatch(t, e)

	t.Log("dedicated ingress on")
	e.commitConfig(t, "dedicated ingress on", map[string][]byte{"clusters/local/cluster.cue": []byte(ingressCluster + "dedicatedIngress: true\n")})
	if on := e.lock(t); !maps.Equal(on, map[string]int64{"styrmin.ingress": 1, "api": 2, "web": 2}) {
		t.Fatalf("on locked %v, want two controllers at 1 and the four applications at 2", on)
	}
	for _, env := range []string{"dev", "staging"} {
		ctl := e.waitTask(t, env+"-styrmin-ingress", "styrmin.ingress", 1)
		requireSucceeded(t, ctl)
		if sd := e.deployment(t, env+"-styrmin-ingress"); sd == nil || sd.Spec.Internal != "ingress" {
			t.Errorf("%s's controller: StyrminDeployment %+v, want spec.internal ingress", env, sd)
		}
	}
	for _, a := range ingressApps {
		requireSucceeded(t, e.waitTask(t, a.env+"-"+a.name, a.name, 2))
	}
	e.waitIngressClasses(t, func(env string) string { return env + "-nginx" })

	t.Log("dedicated ingress off")
	e.commitConfig(t, "dedicated ingress off", map[string][]byte{"clusters/local/cluster.cue": []byte(ingressCluster + "dedicatedIngress: false\n")})
	if off := e.lock(t); !maps.Equal(off, map[string]int64{"styrmin.ingress": 2, "api": 3, "web": 3}) {
		t.Fatalf("off locked %v, want two controller tombstones at 2 and the four applications at 3", off)
	}
	for _, a := range ingressApps {
		requireSucceeded(t, e.waitTask(t, a.env+"-"+a.name, a.name, 3))
	}
	for _, env := range []string{"dev", "staging"} {
		requireSucceeded(t, e.waitTask(t, env+"-styrmin-ingress", "styrmin.ingress", 2))
		ns := env + "-styrmin-ingress"
		agenttest.WaitUntil(t, agentWaitLimit, ns+"'s controller to be deleted", func(ctx context.Context) (bool, string, error) {
			for _, ev := range w.ordered() {
				if ev.kind == "Deployment" && ev.namespace == ns && ev.deleted {
					return true, "", nil
				}
			}
			return false, "no deletion seen", nil
		})
	}
	e.waitIngressClasses(t, func(string) string { return "nginx" })

	events := w.ordered()
	for _, ev := range events {
		t.Log(ev)
	}
	for _, v := range replayViolations(events) {
		t.Error(v)
	}
	// Each application's Ingress went to its environment's class and back.
	for _, a := range ingressApps {
		var classes []string
		for _, ev := range events {
			if ev.kind == "Ingress" && ev.namespace == a.env+"-"+a.name && (len(classes) == 0 || classes[len(classes)-1] != ev.class) {
				classes = append(classes, ev.class)
			}
		}
		if want := []string{"nginx", a.env + "-nginx", "nginx"}; !slices.Equal(classes, want) {
			t.Errorf("%s/%s: Ingress classes %v, want %v", a.env, a.name, classes, want)
		}
	}
	if sd := e.deployment(t, "styrmin-ingress"); sd == nil || sd.Spec.Sequence != 1 {
		t.Errorf("the shared controller was redeployed: %+v", sd)
	}
}

// waitIngressClasses waits until every application's Ingress has the
// class classOf gives its environment.
func (e *agentEnv) waitIngressClasses(t *testing.T, classOf func(env string) string) {
	t.Helper()
	agenttest.WaitUntil(t, agentWaitLimit, "the applications' Ingress classes", func(ctx context.Context) (bool, string, error) {
		var wrong []string
		for _, a := range ingressApps {
			var ing networkingv1.Ingress
			if err := e.c.Get(ctx, client.ObjectKey{Namespace: a.env + "-" + a.name, Name: a.name}, &ing); err != nil {
				return false, err.Error(), nil
			}
			if got := ing.Spec.IngressClassName; got == nil || *got != classOf(a.env) {
				wrong = append(wrong, fmt.Sprintf("%s/%s: %v", a.env, a.name, got))
			}
		}
		return len(wrong) == 0, strings.Join(wrong, ", "), nil
	})
}
