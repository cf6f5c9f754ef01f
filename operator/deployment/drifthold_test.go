package deployment

import (
	"context"
	"strings"
	"testing"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/health"
)

func TestTrimStepJobKeepsWhetherTheJobEndedAndDropsTheRest(t *testing.T) {
	labels := map[string]string{v1alpha1.LabelTask: "web-2", v1alpha1.LabelDeployment: "web"}
	job := func(conds ...batchv1.JobCondition) *batchv1.Job {
		return &batchv1.Job{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-migrate-2", Labels: labels, Annotations: map[string]string{"a": "b"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "styrmin"}}},
			Spec:   batchv1.JobSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "migrate", Image: "migrate:1"}}}}},
			Status: batchv1.JobStatus{Active: 1, Conditions: conds},
		}
	}
	for _, c := range []struct {
		name  string
		job   *batchv1.Job
		ended bool
	}{
		{"running", job(), false},
		{"failing, its pods still stopping", job(batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue, Message: "deadline"}), false},
		{"failed", job(batchv1.JobCondition{Type: batchv1.JobFailureTarget, Status: corev1.ConditionTrue},
			batchv1.JobCondition{Type: batchv1.JobFailed, Status: corev1.ConditionTrue, Message: "deadline"}), true},
		{"complete", job(batchv1.JobCondition{Type: batchv1.JobComplete, Status: corev1.ConditionTrue}), true},
	} {
		for _, obj := range []any{c.job.DeepCopy(), toolscache.DeletedFinalStateUnknown{Key: "ns/web-migrate-2", Obj: c.job.DeepCopy()}} {
			out, err := TrimStepJob(obj)
			if err != nil {
				t.Fatal(err)
			}
			if d, ok := out.(toolscache.DeletedFinalStateUnknown); ok {
				out = d.Obj
			}
			j := out.(*batchv1.Job)
			if got := health.JobEnded(j); got != c.ended {
				t.Errorf("%s: ended %v after the trim, want %v", c.name, got, c.ended)
			}
			if j.Name != "web-migrate-2" || j.Labels[v1alpha1.LabelTask] != "web-2" {
				t.Errorf("%s: name %q, labels %v: the hold names the Job and its task", c.name, j.Name, j.Labels)
			}
			if len(j.Spec.Template.Spec.Containers) != 0 || j.ManagedFields != nil || j.Annotations != nil || j.Status.Active != 0 {
				t.Errorf("%s: kept %+v", c.name, j)
			}
		}
	}
}

// TestAStepJobOfAnotherDeploymentOfTheNamespaceHoldsTheDriftCheck: an
// environment renamed, its namespacePrefix kept, leaves the old
// deployment's migration Job running in the namespace the new deployment
// takes over; the new one's workers must not be started by its drift
// check while it runs. The hold reads every step Job of the namespace,
// whichever deployment's task made it.
func TestAStepJobOfAnotherDeploymentOfTheNamespaceHoldsTheDriftCheck(t *testing.T) {
	job := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "web", Name: "old-web-3-migrate", Labels: map[string]string{
		v1alpha1.LabelTask: "old-web-3", v1alpha1.LabelDeployment: "old-web",
	}}}
	s := runtime.NewScheme()
	if err := batchv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(job).Build()
	hold, err := jobHold(context.Background(), c, "web")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(hold.why, "old-web-3-migrate") {
		t.Fatalf("hold %q; want the old deployment's running Job named", hold.why)
	}
}
