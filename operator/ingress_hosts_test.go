package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
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
	dev := e.instance(t, "local", "dev", "web", 1)
	for _, in := range []*resolver.Instance{staging, dev} {
		ns := in.Context.Deployment.Namespace
		if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	sns, dns := staging.Context.Deployment.Namespace, dev.Context.Deployment.Namespace
	e.write(t, sns, staging)
	e.waitApplied(t, sns, 1)
	host := staging.Values["ingress"].(map[string]any)["host"].(string)
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
