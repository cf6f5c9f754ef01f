package drivers

import "slices"

// KindInfo is what the engine knows about one built-in Kubernetes kind.
// Kinds() is the one table of them: rendering (which objects get the
// deployment's namespace), loading (which kinds a component may select)
// and the agent (what it waits for and scales) all read it.
type KindInfo struct {
	// APIVersion is the kind's served group/version ("apps/v1", "v1").
	APIVersion string
	// Kind is the kind's name ("Deployment").
	Kind string
	// ClusterScoped kinds have no namespace.
	ClusterScoped bool
	// Workload kinds are what a component may be made of: the agent
	// reads their pods and waits until they are ready.
	Workload bool
	// Scalable workloads have spec.replicas: stopComponents scales them
	// to zero and startComponents back.
	Scalable bool
	// Judged kinds are not workloads, but a release holding one is ready
	// only when it is (by kstatus): a Job that completed, a claim that is
	// bound. The agent reads them from the API server, not its cache.
	Judged bool
}

// WorkloadAPIVersion is the API version of every workload kind.
const WorkloadAPIVersion = "apps/v1"

// kindTable is read-only: the exported functions hand out copies. The
// workloads come first, in the order messages list them. Every
// cluster-scoped kind Kubernetes serves (alpha and beta included) must be
// here: TestKindTableMatchesTheAPIServer (operator/release) compares the
// table with a real API server's discovery.
var kindTable = [...]KindInfo{
	{APIVersion: WorkloadAPIVersion, Kind: "Deployment", Workload: true, Scalable: true},
	{APIVersion: WorkloadAPIVersion, Kind: "StatefulSet", Workload: true, Scalable: true},
	// A DaemonSet runs one pod per node: the agent can wait for it but
	// has no replica count to stop or start.
	{APIVersion: WorkloadAPIVersion, Kind: "DaemonSet", Workload: true},
	{APIVersion: "batch/v1", Kind: "Job", Judged: true},
	{APIVersion: "v1", Kind: "PersistentVolumeClaim", Judged: true},

	{APIVersion: "v1", Kind: "Namespace", ClusterScoped: true},
	{APIVersion: "v1", Kind: "Node", ClusterScoped: true},
	{APIVersion: "v1", Kind: "PersistentVolume", ClusterScoped: true},
	{APIVersion: "storage.k8s.io/v1", Kind: "StorageClass", ClusterScoped: true},
	{APIVersion: "storage.k8s.io/v1", Kind: "CSIDriver", ClusterScoped: true},
	{APIVersion: "storage.k8s.io/v1", Kind: "CSINode", ClusterScoped: true},
	{APIVersion: "storage.k8s.io/v1", Kind: "VolumeAttachment", ClusterScoped: true},
	{APIVersion: "storage.k8s.io/v1", Kind: "VolumeAttributesClass", ClusterScoped: true},
	{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole", ClusterScoped: true},
	{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding", ClusterScoped: true},
	{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition", ClusterScoped: true},
	{APIVersion: "apiregistration.k8s.io/v1", Kind: "APIService", ClusterScoped: true},
	{APIVersion: "scheduling.k8s.io/v1", Kind: "PriorityClass", ClusterScoped: true},
	{APIVersion: "networking.k8s.io/v1", Kind: "IngressClass", ClusterScoped: true},
	{APIVersion: "node.k8s.io/v1", Kind: "RuntimeClass", ClusterScoped: true},
	{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingWebhookConfiguration", ClusterScoped: true},
	{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingWebhookConfiguration", ClusterScoped: true},
	{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicy", ClusterScoped: true},
	{APIVersion: "admissionregistration.k8s.io/v1", Kind: "ValidatingAdmissionPolicyBinding", ClusterScoped: true},
	{APIVersion: "certificates.k8s.io/v1", Kind: "CertificateSigningRequest", ClusterScoped: true},
	{APIVersion: "flowcontrol.apiserver.k8s.io/v1", Kind: "FlowSchema", ClusterScoped: true},
	{APIVersion: "flowcontrol.apiserver.k8s.io/v1", Kind: "PriorityLevelConfiguration", ClusterScoped: true},
	{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicy", ClusterScoped: true},
	{APIVersion: "admissionregistration.k8s.io/v1", Kind: "MutatingAdmissionPolicyBinding", ClusterScoped: true},
	{APIVersion: "networking.k8s.io/v1", Kind: "ServiceCIDR", ClusterScoped: true},
	{APIVersion: "networking.k8s.io/v1", Kind: "IPAddress", ClusterScoped: true},
	{APIVersion: "certificates.k8s.io/v1", Kind: "ClusterTrustBundle", ClusterScoped: true},
	{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass", ClusterScoped: true},
	{APIVersion: "resource.k8s.io/v1", Kind: "ResourceSlice", ClusterScoped: true},
	{APIVersion: "resource.k8s.io/v1", Kind: "DeviceTaintRule", ClusterScoped: true},
	{APIVersion: "resource.k8s.io/v1alpha3", Kind: "ResourcePoolStatusRequest", ClusterScoped: true},
	{APIVersion: "storagemigration.k8s.io/v1", Kind: "StorageVersionMigration", ClusterScoped: true},
	{APIVersion: "internal.apiserver.k8s.io/v1alpha1", Kind: "StorageVersion", ClusterScoped: true},
	{APIVersion: "v1", Kind: "ComponentStatus", ClusterScoped: true},
	// Reviews are only created, never stored, but are served without a
	// namespace like any other cluster-scoped kind.
	{APIVersion: "authentication.k8s.io/v1", Kind: "TokenReview", ClusterScoped: true},
	{APIVersion: "authentication.k8s.io/v1", Kind: "SelfSubjectReview", ClusterScoped: true},
	{APIVersion: "authorization.k8s.io/v1", Kind: "SubjectAccessReview", ClusterScoped: true},
	{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectAccessReview", ClusterScoped: true},
	{APIVersion: "authorization.k8s.io/v1", Kind: "SelfSubjectRulesReview", ClusterScoped: true},
}

// Kinds returns the table of built-in kinds the engine treats specially:
// the workload kinds, then the cluster-scoped ones. Kinds not in it,
// custom ones included, are namespaced and not workloads.
func Kinds() []KindInfo { return slices.Clone(kindTable[:]) }

// lookupKind finds a kind by name. Rendering calls it for every object,
// so it scans the small array instead of building an index.
func lookupKind(kind string) (KindInfo, bool) {
	for _, k := range kindTable {
		if k.Kind == kind {
			return k, true
		}
	}
	return KindInfo{}, false
}

// IsClusterScoped reports whether kind is a built-in kind without a
// namespace. Like Helm, it goes by the kind's name alone: a chart's
// objects are scoped before any API server is asked (the agent's policy
// check asks its cluster too: CheckPolicyWith).
func IsClusterScoped(kind string) bool {
	k, ok := lookupKind(kind)
	return ok && k.ClusterScoped
}

// ClusterScopedKinds returns the names of the built-in cluster-scoped
// kinds, in the table's order.
func ClusterScopedKinds() []string {
	return kindNames(func(k KindInfo) bool { return k.ClusterScoped })
}

// WorkloadKinds returns the kinds a component may be made of (all of
// WorkloadAPIVersion): the ones the agent can wait for.
func WorkloadKinds() []string {
	return kindNames(func(k KindInfo) bool { return k.Workload })
}

// ScalableKinds returns the workload kinds stopComponents and
// startComponents can scale.
func ScalableKinds() []string {
	return kindNames(func(k KindInfo) bool { return k.Scalable })
}

// IsWorkloadKind reports whether an object of apiVersion and kind is a
// workload a component may be made of. A custom resource that reuses a
// workload's kind name in another group is not one.
func IsWorkloadKind(apiVersion, kind string) bool {
	k, ok := lookupKind(kind)
	return ok && k.Workload && k.APIVersion == apiVersion
}

// isWorkloadKindName reports whether a component's selector may name
// kind; selectors name kinds without an API version, which is always
// WorkloadAPIVersion.
func isWorkloadKindName(kind string) bool {
	return IsWorkloadKind(WorkloadAPIVersion, kind)
}

// IsJudged reports whether an object of apiVersion and kind makes its
// release not ready until kstatus says it is current (see KindInfo).
func IsJudged(apiVersion, kind string) bool {
	k, ok := lookupKind(kind)
	return ok && k.Judged && k.APIVersion == apiVersion
}

// CanScale reports whether workloads of kind can be stopped and started
// (scaled to zero and back).
func CanScale(kind string) bool {
	k, ok := lookupKind(kind)
	return ok && k.Scalable
}

func kindNames(keep func(KindInfo) bool) []string {
	var out []string
	for _, k := range kindTable {
		if keep(k) {
			out = append(out, k.Kind)
		}
	}
	return out
}
