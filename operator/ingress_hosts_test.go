package operator_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/release"
	"github.com/styrmin/styrmin/resolver"
)

// TestAnIngressClaimingAHostAnotherDeploymentHoldsStallsNamingIt: dev's
// web locked with staging's host (a driver taking its host from a
// parameter, or a lock of another repository) rendered an Ingress the
// ingress controller merged with staging's, splitting its traffic, and
// both read Ready. dev's apply now stalls (HostClaimed) naming staging's
// deployment, its Ingress and the host, and creates nothing; another host
// applies. (Wildcards meet hosts through the same index:
// drivers.TestHostClaimsOverlapOnOneClassByHostOrWildcard.)
func TestAnIngressClaimingAHostAnotherDeploymentHoldsStallsNamingIt(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	staging := withIngress(t, e.instance(t, "local", "staging", "web", 1), 1, "")
	dev, sns, dns, host := stagingAndDev(t, e, staging)
	e.write(t, sns, staging)
	e.waitApplied(t, sns, 1)
	e.write(t, dns, withIngress(t, dev, 1, host))
	agenttest.WaitUntil(t, 60*time.Second, "dev's apply of staging's host to stall", func(ctx context.Context) (bool, string, error) {
		sd, err := e.deploymentOf(ctx, dns)
		if err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionStalled)
		if sd.Status.ObservedGeneration != sd.Generation || c == nil || c.Status != metav1.ConditionTrue {
			return false, fmt.Sprintf("%+v", sd.Status.Conditions), nil
		}
		if c.Reason != v1alpha1.ReasonHostClaimed {
			t.Fatalf("Stalled %s: %q; want %s", c.Reason, c.Message, v1alpha1.ReasonHostClaimed)
		}
		for _, want := range []string{host, "local/staging/web", sns + "/web"} {
			if !strings.Contains(c.Message, want) {
				t.Errorf("Stalled's message %q does not name %q", c.Message, want)
			}
		}
		return true, "", nil
	})
	err := e.client.Get(ctx, client.ObjectKey{Namespace: dns, Name: "web"}, &networkingv1.Ingress{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("dev's Ingress: %v; want none applied", err)
	}
	e.write(t, dns, withIngress(t, dev, 2, ""))
	e.waitApplied(t, dns, 2)
}

// TestTwoAppliesOfOneHostAtOnceLetOnlyTheFirstTakeIt: the controller
// runs several workers; staging's and dev's applies of one host at the
// same moment both found the cache without an Ingress holding it, and
// both took it. Staging's apply is held between its checks and its apply:
// dev's apply meanwhile waits (HostClaimed, naming staging), applies
// nothing, and once staging's Ingress is in, stalls naming it.
func TestTwoAppliesOfOneHostAtOnceLetOnlyTheFirstTakeIt(t *testing.T) {
	t.Parallel()
	var holdNS atomic.Pointer[string]
	reached, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e := startEnvWithOptions(t, func(o *operator.ManagerOptions) {
		o.BeforeApply = func(ctx context.Context, ns string) {
			if p := holdNS.Load(); p == nil || *p != ns {
				return
			}
			once.Do(func() {
				close(reached)
				select {
				case <-resume:
				case <-ctx.Done():
				}
			})
		}
	})
	var resumed sync.Once
	release := func() { resumed.Do(func() { close(resume) }) }
	t.Cleanup(release)
	ctx := context.Background()
	staging := withIngress(t, e.instance(t, "local", "staging", "web", 1), 1, "")
	dev, sns, dns, host := stagingAndDev(t, e, staging)
	holdNS.Store(&sns)
	e.write(t, sns, staging)
	select {
	case <-reached:
	case <-time.After(60 * time.Second):
		t.Fatal("staging's apply did not reach its hold")
	}
	e.write(t, dns, withIngress(t, dev, 1, host))
	agenttest.WaitUntil(t, 60*time.Second, "dev's apply to wait for staging's", func(ctx context.Context) (bool, string, error) {
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: dns, Name: "web"}, &networkingv1.Ingress{}); err == nil {
			t.Fatal("dev applied an Ingress of staging's host while staging's apply of it was under way")
		}
		sd, err := e.deploymentOf(ctx, dns)
		if err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady)
		if sd.Status.ObservedGeneration != sd.Generation || c == nil || c.Reason != v1alpha1.ReasonHostClaimed {
			return false, fmt.Sprintf("%+v", sd.Status.Conditions), nil
		}
		for _, want := range []string{host, "local/staging/web", sns} {
			if !strings.Contains(c.Message, want) {
				t.Errorf("Ready's message %q does not name %q", c.Message, want)
			}
		}
		return true, "", nil
	})
	release()
	e.waitApplied(t, sns, 1)
	agenttest.WaitUntil(t, 60*time.Second, "dev's apply to stall on staging's Ingress", func(ctx context.Context) (bool, string, error) {
		sd, err := e.deploymentOf(ctx, dns)
		if err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionStalled)
		if c == nil || c.Status != metav1.ConditionTrue || c.Reason != v1alpha1.ReasonHostClaimed {
			return false, fmt.Sprintf("%+v", sd.Status.Conditions), nil
		}
		return strings.Contains(c.Message, sns+"/web"), c.Message, nil
	})
	err := e.client.Get(ctx, client.ObjectKey{Namespace: dns, Name: "web"}, &networkingv1.Ingress{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("dev's Ingress: %v; want none applied", err)
	}
}

// TestADriftCorrectionLeavesOutAnIngressWhoseHostAnotherDeploymentTook:
// staging's Ingress deleted by hand, dev took its host meanwhile (its
// apply found it free); staging's drift correction made its Ingress
// again, and both claimed the host. The correction now leaves it out,
// says so (Drifted, DriftCorrectionFailed, naming dev's deployment and
// Ingress), and puts it back once dev gives the host up.
func TestADriftCorrectionLeavesOutAnIngressWhoseHostAnotherDeploymentTook(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	staging := withIngress(t, e.instance(t, "local", "staging", "web", 1), 1, "")
	dev, sns, dns, host := stagingAndDev(t, e, staging)
	e.write(t, sns, staging)
	e.waitApplied(t, sns, 1)

	// Staging's drift check waits for a task while its Ingress goes and
	// dev takes the host: the correction comes after.
	task := e.createTask(t, staging, v1alpha1.WorkflowUpgrade)
	task.Status.Phase = v1alpha1.TaskRunning
	if err := e.client.Status().Update(ctx, task); err != nil {
		t.Fatal(err)
	}
	waitDrifted(t, e, sns, "staging's drift check to pause", func(c *metav1.Condition) bool { return c.Reason == v1alpha1.ReasonDriftCheckPaused })
	if err := e.client.Delete(ctx, &networkingv1.Ingress{ObjectMeta: metav1.ObjectMeta{Namespace: sns, Name: "web"}}); err != nil {
		t.Fatal(err)
	}
	e.write(t, dns, withIngress(t, dev, 1, host))
	e.waitApplied(t, dns, 1)
	task.Status.Phase = v1alpha1.TaskSucceeded
	if err := e.client.Status().Update(ctx, task); err != nil {
		t.Fatal(err)
	}
	c := waitDrifted(t, e, sns, "staging's correction to leave its Ingress out", func(c *metav1.Condition) bool {
		return c.Reason == v1alpha1.ReasonDriftCorrectionFailed
	})
	for _, want := range []string{"Ingress/web", host, "local/dev/web", dns + "/web"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Drifted's message %q does not name %q", c.Message, want)
		}
	}
	time.Sleep(2 * driftInterval)
	err := e.client.Get(ctx, client.ObjectKey{Namespace: sns, Name: "web"}, &networkingv1.Ingress{})
	if !apierrors.IsNotFound(err) {
		t.Fatalf("staging's Ingress: %v; want it left out while dev holds its host", err)
	}

	e.write(t, dns, withIngress(t, dev, 2, ""))
	e.waitApplied(t, dns, 2)
	agenttest.WaitUntil(t, 60*time.Second, "staging's Ingress put back once dev gave the host up", func(ctx context.Context) (bool, string, error) {
		err := e.client.Get(ctx, client.ObjectKey{Namespace: sns, Name: "web"}, &networkingv1.Ingress{})
		return err == nil, fmt.Sprint(err), nil
	})
}

// TestAnIngressWithoutAClassClaimsItsHostOnTheDefaultClass: an Ingress
// without a class is the cluster's default class's (the API server's
// admission names it on those made while it is the default), yet the
// check took "" and the default class's name for two classes: staging's
// Ingress without a class and dev's naming the default class, or dev's
// made without one (named by the admission) and staging's rendered
// without one, both claimed one host. Both ways now stall naming the
// holder.
func TestAnIngressWithoutAClassClaimsItsHostOnTheDefaultClass(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	staging := withClass(t, withIngress(t, e.instance(t, "local", "staging", "web", 1), 1, ""), "")
	dev, sns, dns, host := stagingAndDev(t, e, staging)
	e.write(t, sns, staging)
	e.waitApplied(t, sns, 1)
	// Made default after staging's Ingress: that one stays without a
	// class.
	class := &networkingv1.IngressClass{
		ObjectMeta: metav1.ObjectMeta{Name: "nginx", Annotations: map[string]string{networkingv1.AnnotationIsDefaultIngressClass: "true"}},
		Spec:       networkingv1.IngressClassSpec{Controller: "k8s.io/ingress-nginx"},
	}
	if err := e.client.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	e.write(t, dns, withClass(t, withIngress(t, dev, 1, host), "nginx"))
	waitHostClaimed(t, e, dns, host, sns+"/web")

	// dev's Ingress without a class, on a host of its own: the admission
	// names the default class on it. Staging's rendered without one, on
	// that host, meets it.
	e.write(t, dns, withClass(t, withIngress(t, dev, 2, ""), ""))
	e.waitApplied(t, dns, 2)
	var ing networkingv1.Ingress
	if err := e.client.Get(ctx, client.ObjectKey{Namespace: dns, Name: "web"}, &ing); err != nil {
		t.Fatal(err)
	}
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" {
		t.Fatalf("dev's Ingress class %v: want the admission's default, nginx", ing.Spec.IngressClassName)
	}
	devHost := ing.Spec.Rules[0].Host
	e.write(t, sns, withClass(t, withIngress(t, staging, 2, devHost), ""))
	waitHostClaimed(t, e, sns, devHost, dns+"/web")
}

// TestAnIngressServingAnotherPathOfAHostOverTLSApartStallsNamingBothSecrets:
// staging's Ingress routes path /api of a host with TLS Secret api-tls;
// dev's apply of its root with its own Secret (web-tls) passed, as
// another path, and the ingress controller served one of the two
// certificates for both, dev's clients (or staging's) getting the
// other's. dev's apply now stalls (HostClaimed) naming staging's
// deployment and Ingress, the host and both Secrets, and creates
// nothing; naming staging's Secret, it applies.
func TestAnIngressServingAnotherPathOfAHostOverTLSApartStallsNamingBothSecrets(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	ctx := context.Background()
	staging := e.instance(t, "local", "staging", "web", 1)
	dev, sns, dns, host := stagingAndDev(t, e, staging)
	e.write(t, sns, staging)
	e.waitApplied(t, sns, 1)
	// Staging's release's Ingress of path /api, as a chart of its own
	// would make it.
	class, _ := staging.Values["ingress"].(map[string]any)["className"].(string)
	prefix := networkingv1.PathTypePrefix
	api := &networkingv1.Ingress{
		ObjectMeta: metav1.ObjectMeta{Namespace: sns, Name: "api", Annotations: map[string]string{
			release.ReleaseNameAnnotation: "web", release.ReleaseNamespaceAnnotation: sns},
			Labels: map[string]string{release.ManagedByLabel: release.ManagedByValue}},
		Spec: networkingv1.IngressSpec{
			IngressClassName: &class,
			TLS:              []networkingv1.IngressTLS{{Hosts: []string{host}, SecretName: "api-tls"}},
			Rules: []networkingv1.IngressRule{{Host: host, IngressRuleValue: networkingv1.IngressRuleValue{HTTP: &networkingv1.HTTPIngressRuleValue{
				Paths: []networkingv1.HTTPIngressPath{{Path: "/api", PathType: &prefix, Backend: networkingv1.IngressBackend{
					Service: &networkingv1.IngressServiceBackend{Name: "web", Port: networkingv1.ServiceBackendPort{Number: 80}}}}},
			}}}},
		},
	}
	if err := e.client.Create(ctx, api); err != nil {
		t.Fatal(err)
	}
	e.write(t, dns, withTLS(t, withIngress(t, dev, 1, host), "web-tls"))
	msg := waitHostClaimed(t, e, dns, host, sns+"/api")
	for _, want := range []string{"TLS Secret web-tls", "TLS Secret api-tls", "local/staging/web", "one certificate for the host"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Stalled's message %q does not say %q", msg, want)
		}
	}
	e.write(t, dns, withTLS(t, withIngress(t, dev, 2, host), "api-tls"))
	e.waitApplied(t, dns, 2)
}

// withTLS is in with its Ingress's TLS Secret secret.
func withTLS(t *testing.T, in *resolver.Instance, secret string) *resolver.Instance {
	return withIngressValue(t, in, "tlsSecret", secret)
}

// withIngressValue is in with its ingress value field set to v, its
// digest computed again.
func withIngressValue(t *testing.T, in *resolver.Instance, field string, v any) *resolver.Instance {
	t.Helper()
	out := *in
	out.Values = clone(in.Values)
	ing := clone(in.Values["ingress"].(map[string]any))
	ing[field] = v
	out.Values["ingress"] = ing
	d, err := out.ComputeDigest()
	if err != nil {
		t.Fatal(err)
	}
	out.Digest = d
	return &out
}

// waitHostClaimed waits until ns's apply stalls (HostClaimed) naming host
// and the Ingress (namespace/name) holding it, and returns the Stalled
// condition's message.
func waitHostClaimed(t *testing.T, e *env, ns, host, holder string) string {
	t.Helper()
	var msg string
	agenttest.WaitUntil(t, 60*time.Second, ns+"'s apply of "+host+" to stall", func(ctx context.Context) (bool, string, error) {
		sd, err := e.deploymentOf(ctx, ns)
		if err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionStalled)
		if sd.Status.ObservedGeneration != sd.Generation || c == nil || c.Status != metav1.ConditionTrue {
			return false, fmt.Sprintf("%+v", sd.Status.Conditions), nil
		}
		if c.Reason != v1alpha1.ReasonHostClaimed || !strings.Contains(c.Message, host) || !strings.Contains(c.Message, holder) {
			t.Fatalf("Stalled %s: %q; want %s naming %s and %s", c.Reason, c.Message, v1alpha1.ReasonHostClaimed, host, holder)
		}
		msg = c.Message
		return true, "", nil
	})
	var ing networkingv1.Ingress
	err := e.client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "web"}, &ing)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	for _, r := range ing.Spec.Rules {
		if r.Host == host {
			t.Fatalf("%s's Ingress was applied with host %s", ns, host)
		}
	}
	return msg
}

// withClass is in with its Ingress on class ("": none).
func withClass(t *testing.T, in *resolver.Instance, class string) *resolver.Instance {
	return withIngressValue(t, in, "className", class)
}

// waitDrifted waits until ns's Drifted condition is as ok says, and
// returns it.
func waitDrifted(t *testing.T, e *env, ns, what string, ok func(*metav1.Condition) bool) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	agenttest.WaitUntil(t, 60*time.Second, what, func(ctx context.Context) (bool, string, error) {
		sd, err := e.deploymentOf(ctx, ns)
		if err != nil {
			return false, err.Error(), nil
		}
		c = apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionDrifted)
		return c != nil && ok(c), fmt.Sprintf("Drifted: %+v", c), nil
	})
	return c
}

// stagingAndDev makes the namespaces of staging (an instance of
// local/staging/web) and of local/dev/web, and returns dev's instance,
// the two namespaces and staging's host.
func stagingAndDev(t *testing.T, e *env, staging *resolver.Instance) (dev *resolver.Instance, sns, dns, host string) {
	t.Helper()
	dev = e.instance(t, "local", "dev", "web", 1)
	for _, in := range []*resolver.Instance{staging, dev} {
		ns := in.Context.Deployment.Namespace
		if err := e.client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	host, _ = staging.Values["ingress"].(map[string]any)["host"].(string)
	return dev, staging.Context.Deployment.Namespace, dev.Context.Deployment.Namespace, host
}

// withIngress is in at sequence seq with its Ingress on, at host (""
// keeps the driver's).
func withIngress(t *testing.T, in *resolver.Instance, seq int64, host string) *resolver.Instance {
	t.Helper()
	out := *in
	out.Sequence = seq
	out.Values = clone(in.Values)
	ing := clone(in.Values["ingress"].(map[string]any))
	ing["enabled"] = true
	if host != "" {
		ing["host"] = host
	}
	out.Values["ingress"] = ing
	d, err := out.ComputeDigest()
	if err != nil {
		t.Fatal(err)
	}
	out.Digest = d
	return &out
}
