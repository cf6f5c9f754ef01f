package operator_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// TestAnApplyRefusedByAQuotaSaysSoNotRBAC: the API server answers 403 for
// a ResourceQuota as for RBAC; the condition said "the cluster's RBAC does
// not allow", which sends whoever reads it to the Roles instead of the
// quota. Once the quota is lifted the apply goes through (retried).
func TestAnApplyRefusedByAQuotaSaysSoNotRBAC(t *testing.T) {
	t.Parallel()
	e := startEnv(t)
	in := e.instance(t, "local", "staging", "web", 1)
	ns := in.Context.Deployment.Namespace
	ctx := context.Background()
	if err := e.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-services", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceServices: resource.MustParse("0")}}}
	if err := e.client.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	e.write(t, ns, in)
	agenttest.WaitUntil(t, 60*time.Second, "the apply to be refused by the quota", func(ctx context.Context) (bool, string, error) {
		var sd v1alpha1.StyrminDeployment
		if err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &sd); err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Reason != v1alpha1.ReasonQuotaExceeded {
			return false, fmt.Sprintf("%+v", c), nil
		}
		if strings.Contains(c.Message, "RBAC") || !strings.Contains(c.Message, "ResourceQuota") {
			t.Errorf("the condition's message %q: want the quota named, not RBAC", c.Message)
		}
		return true, "", nil
	})
	if err := e.client.Delete(ctx, quota); err != nil {
		t.Fatal(err)
	}
	e.waitApplied(t, ns, 1)
}
