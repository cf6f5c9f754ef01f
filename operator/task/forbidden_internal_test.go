package task

import (
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// TestAStepRefusedByAnAdmissionPolicyOrAQuotaDoesNotBlameRBAC: a Job a
// step creates, refused by Kyverno's or Gatekeeper's webhook (403) or by
// a ResourceQuota, failed its step saying "the cluster's RBAC does not
// allow", sending whoever read it to the Roles.
func TestAStepRefusedByAnAdmissionPolicyOrAQuotaDoesNotBlameRBAC(t *testing.T) {
	jobs := schema.GroupResource{Group: "batch", Resource: "jobs"}
	a := Actor{User: "system:serviceaccount:app:deployer"}
	for _, tc := range []struct {
		name, msg, want string
	}{
		{"a webhook", `admission webhook "validation.gatekeeper.sh" denied the request: [signed-images] unsigned`, "an admission policy of the cluster refuses it"},
		{"a quota", "exceeded quota: jobs, requested: count/jobs.batch=1, used: count/jobs.batch=2, limited: count/jobs.batch=2", "a ResourceQuota refuses it"},
		{"RBAC", `User "system:serviceaccount:app:deployer" cannot create resource "jobs" in API group "batch" in the namespace "app"`, "RBAC does not allow"},
	} {
		err := forbidden(a, "creating job app/migrate-1", apierrors.NewForbidden(jobs, "migrate-1", errors.New(tc.msg)))
		if !strings.Contains(err.Error(), tc.want) || (tc.name != "RBAC" && strings.Contains(err.Error(), "RBAC")) {
			t.Errorf("%s: %v; want it to say %q", tc.name, err, tc.want)
		}
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: the API server's reason was lost: %v", tc.name, err)
		}
	}
}
