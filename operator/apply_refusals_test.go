package operator_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/internal/agenttest"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// TestAnApplyRefusedByAQuotaSaysSoNotRBAC: the API server answers 403 for
// a ResourceQuota as for RBAC; the condition said "the cluster's RBAC does
// not allow", which sends whoever reads it to the Roles instead of the
// quota. Once the quota is lifted the apply goes through (retried).
func TestAnApplyRefusedByAQuotaSaysSoNotRBAC(t *testing.T) {
	t.Parallel()
	e, in, ns := stagingWebToApply(t)
	ctx := context.Background()
	quota := &corev1.ResourceQuota{ObjectMeta: metav1.ObjectMeta{Name: "no-services", Namespace: ns},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{corev1.ResourceServices: resource.MustParse("0")}}}
	if err := e.client.Create(ctx, quota); err != nil {
		t.Fatal(err)
	}
	e.write(t, ns, in)
	agenttest.WaitUntil(t, 60*time.Second, "the apply to be refused by the quota", func(ctx context.Context) (bool, string, error) {
		sd, err := e.deploymentOf(ctx, ns)
		if err != nil {
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

// TestAnApplyRefusedByAnAdmissionPolicySaysSoAndStalls: an admission
// policy's denial (Kyverno's or Gatekeeper's webhook, a
// ValidatingAdmissionPolicy of reason Forbidden) is a 403, as RBAC's; the
// condition said "the cluster's RBAC does not allow", sending whoever read
// it to the Roles, and the apply was retried as if the RBAC might change,
// so a task waited for its timeout. It now names the policy (AdmissionDenied) and stalls:
// the same objects are refused again until git or the policy changes.
// Once the policy goes, the slow retry applies it.
func TestAnApplyRefusedByAnAdmissionPolicySaysSoAndStalls(t *testing.T) {
	t.Parallel()
	e, in, ns := stagingWebToApply(t)
	ctx := context.Background()
	forbidden := metav1.StatusReasonForbidden
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "no-services-" + ns},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create, admissionregistrationv1.Update},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"services"}},
				},
			}}},
			// 403, as Kyverno's and Gatekeeper's webhooks answer a denial.
			Validations: []admissionregistrationv1.Validation{{Expression: "false", Message: "services are not allowed here", Reason: &forbidden}},
		},
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
	for _, o := range []client.Object{policy, binding} {
		if err := e.client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	agenttest.WaitUntil(t, 30*time.Second, "the admission policy in force", func(ctx context.Context) (bool, string, error) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: ns},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
		err := e.client.Create(ctx, svc, client.DryRunAll)
		return err != nil && strings.Contains(err.Error(), "not allowed here"), fmt.Sprint(err), nil
	})
	e.write(t, ns, in)
	agenttest.WaitUntil(t, 60*time.Second, "the apply to be refused by the policy", func(ctx context.Context) (bool, string, error) {
		sd, err := e.deploymentOf(ctx, ns)
		if err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason == v1alpha1.ReasonProgressing {
			return false, fmt.Sprintf("%+v", c), nil
		}
		if c.Reason != v1alpha1.ReasonAdmissionDenied || strings.Contains(c.Message, "RBAC") ||
			!strings.Contains(c.Message, policy.Name) || !strings.Contains(c.Message, "not allowed here") {
			t.Fatalf("Ready %s: %q; want %s naming the policy and its message, not RBAC", c.Reason, c.Message, v1alpha1.ReasonAdmissionDenied)
		}
		if !apimeta.IsStatusConditionTrue(sd.Status.Conditions, v1alpha1.ConditionStalled) {
			t.Fatalf("conditions %+v: want Stalled, the same objects are refused again", sd.Status.Conditions)
		}
		return true, "", nil
	})
	if err := e.client.Delete(ctx, binding); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 60*time.Second, "the slow retry to apply it once the policy went", func(ctx context.Context) (bool, string, error) {
		sd, err := e.deploymentOf(ctx, ns)
		if err != nil {
			return false, err.Error(), nil
		}
		return sd.Status.AppliedSequence == 1 && apimeta.IsStatusConditionTrue(sd.Status.Conditions, v1alpha1.ConditionReady),
			fmt.Sprintf("%v", sd.Status.Conditions), nil
	})
}

// TestAnApplyConflictWithAnotherFieldManagerStallsNamingTheObjectFieldAndManager:
// the release's ConfigMap exists, made by kubectl's server-side apply with
// another message. No retry takes it over and kubectl does not let go by
// itself, yet the conflict was retried as if the world might change, so a
// task waited for its timeout. It now stalls (the task fails at once),
// naming the object, the field and the manager; once the object is
// removed, the slow look on the drift interval applies the release.
func TestAnApplyConflictWithAnotherFieldManagerStallsNamingTheObjectFieldAndManager(t *testing.T) {
	t.Parallel()
	e, in, ns := stagingWebToApply(t)
	ctx := context.Background()
	theirs := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"web-content"},"data":{"message":"theirs"}}`)
	if _, err := e.clientset.CoreV1().ConfigMaps(ns).Patch(ctx, "web-content", types.ApplyPatchType, theirs, metav1.PatchOptions{FieldManager: "kubectl"}); err != nil {
		t.Fatal(err)
	}
	e.write(t, ns, in)
	agenttest.WaitUntil(t, 60*time.Second, "the apply to stall on the conflict", func(ctx context.Context) (bool, string, error) {
		sd, err := e.deploymentOf(ctx, ns)
		if err != nil {
			return false, err.Error(), nil
		}
		c := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady)
		if c == nil || c.Reason != v1alpha1.ReasonApplyConflict {
			return false, fmt.Sprintf("%+v", c), nil
		}
		for _, want := range []string{"web-content", `"kubectl"`, ".data.message"} {
			if !strings.Contains(c.Message, want) {
				t.Errorf("the condition's message %q: want %s named", c.Message, want)
			}
		}
		_, err = instance.Applied(sd, 1)
		return errors.Is(err, instance.ErrStalled), fmt.Sprintf("Applied: %v; conditions %+v", err, sd.Status.Conditions), nil
	})
	if err := e.clientset.CoreV1().ConfigMaps(ns).Delete(ctx, "web-content", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	agenttest.WaitUntil(t, 60*time.Second, "the slow look to apply it once the object went", func(ctx context.Context) (bool, string, error) {
		sd, err := e.deploymentOf(ctx, ns)
		if err != nil {
			return false, err.Error(), nil
		}
		return sd.Status.AppliedSequence == 1 && apimeta.IsStatusConditionTrue(sd.Status.Conditions, v1alpha1.ConditionReady),
			fmt.Sprintf("%v", sd.Status.Conditions), nil
	})
}

// stagingWebToApply starts an agent's world with local/staging/web's
// first instance made, not written yet, and its namespace: the world, the
// instance and the namespace.
func stagingWebToApply(t *testing.T) (*env, *resolver.Instance, string) {
	t.Helper()
	e := startEnv(t)
	in := e.instance(t, "local", "staging", "web", 1)
	ns := in.Context.Deployment.Namespace
	if err := e.client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return e, in, ns
}

// deploymentOf reads the StyrminDeployment of namespace ns (named as it).
func (e *env) deploymentOf(ctx context.Context, ns string) (*v1alpha1.StyrminDeployment, error) {
	var sd v1alpha1.StyrminDeployment
	err := e.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: ns}, &sd)
	return &sd, err
}
