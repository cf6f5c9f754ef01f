package health

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// A chart's real workload may be a custom resource (a CloudNativePG
// Cluster, a cert-manager Certificate, a Strimzi Kafka): its operator does
// the rollout, and its status says whether it is done. The release is
// ready only when each custom resource it holds is, by kstatus (as a Job
// or a claim is): InProgress (a Ready condition False, a generation not
// observed yet) is not ready, Failed (Stalled) is failed, and Current is
// ready, which kstatus also says of a custom resource with no status or
// no conditions it knows (a ServiceMonitor, a resource whose operator
// writes none). The agent watches none of them: each is read from the API
// server at each check, so a release without one costs no request more.

// builtinGroups are the API groups kube-apiserver serves itself: the
// legacy group "", the groups without a domain Kubernetes kept from before
// it put them under k8s.io, and the k8s.io groups it serves. A group
// ending in ".k8s.io" is not enough to tell: Kubernetes projects define
// custom resources there too (Gateway API's gateway.networking.k8s.io,
// the CSI snapshotter's snapshot.storage.k8s.io), and their objects have
// a status their controllers write. TestBuiltinGroupsAreWhatTheAPIServerServes
// checks the list against a real API server's discovery; a built-in group
// a later Kubernetes adds before it is listed is judged by kstatus's
// generic rules (a read more) until it is.
var builtinGroups = map[string]bool{
	"":                             true,
	"apps":                         true,
	"batch":                        true,
	"autoscaling":                  true,
	"policy":                       true,
	"extensions":                   true,
	"admissionregistration.k8s.io": true,
	"apiextensions.k8s.io":         true,
	"apiregistration.k8s.io":       true,
	"authentication.k8s.io":        true,
	"authorization.k8s.io":         true,
	"certificates.k8s.io":          true,
	"coordination.k8s.io":          true,
	"discovery.k8s.io":             true,
	"events.k8s.io":                true,
	"flowcontrol.apiserver.k8s.io": true,
	"internal.apiserver.k8s.io":    true,
	"networking.k8s.io":            true,
	"node.k8s.io":                  true,
	"rbac.authorization.k8s.io":    true,
	"resource.k8s.io":              true,
	"scheduling.k8s.io":            true,
	"storage.k8s.io":               true,
	"storagemigration.k8s.io":      true,
}

// IsCustomResource reports whether an object of apiVersion is of a kind
// Kubernetes does not serve itself (a CustomResourceDefinition's, or an
// aggregated API's): one whose API group is not one of kube-apiserver's
// own (builtinGroups). An apiVersion that does not parse is none.
func IsCustomResource(apiVersion string) bool {
	gv, err := schema.ParseGroupVersion(apiVersion)
	return err == nil && !builtinGroups[gv.Group]
}

// notServed is the message of a custom resource whose kind the API server
// no longer serves.
const notServed = "its kind is not served by the API server (its CustomResourceDefinition removed?)"

// NotServed reports whether a custom resource's status says its kind is
// no longer served: no poll will see it change.
func NotServed(w v1alpha1.WorkloadStatus) bool { return w.Message == notServed }

// CustomResource reads a custom resource from the API server and tells,
// by kstatus, whether it is ready (as Judged does). Two answers are no
// error of the health check, which would leave every other component
// unjudged too: a kind the API server does not serve (its CRD removed:
// the object cannot exist) is not ready, saying so; one c may not read is
// not judged, and ready, saying why: the agent reads health as itself,
// and the role an environment's service account is given for the kinds
// its chart applies is not the agent's. The message of its conditions is
// its operator's, masked with sensitive (see statusMessage).
func CustomResource(ctx context.Context, c client.Reader, r v1alpha1.ObjectRef, sensitive SensitiveValues) (v1alpha1.WorkloadStatus, error) {
	ws, err := Judged(ctx, c, r, sensitive)
	switch {
	case err == nil:
		return ws, nil
	case meta.IsNoMatchError(err):
		return v1alpha1.WorkloadStatus{Kind: r.Kind, Name: r.Name, DesiredReplicas: 1, Message: notServed}, nil
	case apierrors.IsForbidden(err):
		return v1alpha1.WorkloadStatus{Kind: r.Kind, Name: r.Name, DesiredReplicas: 1, ReadyReplicas: 1, Ready: true,
			Message: "not judged: the agent may not read " + r.Kind + " objects (" + r.APIVersion + "); grant it get on them to judge them"}, nil
	}
	return ws, err
}
