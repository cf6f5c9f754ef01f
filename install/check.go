package install

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilversion "k8s.io/apimachinery/pkg/util/version"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/version"
)

// MinKubernetes is the oldest Kubernetes Styrmin supports: its admission
// policy is an admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy,
// served from Kubernetes 1.30 on.
const MinKubernetes = "1.30"

// Finding is the outcome of one check.
type Finding struct {
	// OK is true when the check passed.
	OK bool `json:"ok"`
	// Message says what was checked and found; for a failed check, why
	// and what to do.
	Message string `json:"message"`
}

// CheckOptions are the settings of Check.
type CheckOptions struct {
	// Namespace is the agent's namespace (default DefaultNamespace).
	Namespace string
	// Pre checks only the prerequisites of an installation: the API
	// server's version and, with Repo, the repository.
	Pre bool
	// Repo and Branch name the repository to reach (default: the agent
	// Deployment's --repo and --branch; without Repo and with Pre, none).
	Repo, Branch string
	// Token is the repository's access token; "" uses the Secret the
	// agent Deployment's --repo-secret names (not with Pre).
	Token string
	// GitTimeout bounds reaching the repository (default 30 seconds).
	GitTimeout time.Duration
	// Version is this build's version, which the CRDs' schemas are
	// compared against (default version.Get().Short()).
	Version string
}

// Check checks the cluster of cfg: the API server's version, and unless
// o.Pre the installation (CRDs established at the versions this build
// expects, RBAC and the admission policy, the agent's Deployment ready and
// its StyrminSource Ready), then the repository. One Finding each, in that
// order; all passed when every Finding is OK.
func Check(ctx context.Context, cfg *rest.Config, o CheckOptions) []Finding {
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.GitTimeout == 0 {
		o.GitTimeout = 30 * time.Second
	}
	if o.Version == "" {
		o.Version = version.Get().Short()
	}
	v, err := KubernetesVersion(cfg)
	if err != nil {
		return []Finding{fail("Kubernetes API server unreachable: %v (check the kubeconfig and its context)", err)}
	}
	out := []Finding{checkKubernetesVersion(v)}
	if o.Pre {
		if o.Repo != "" {
			out = append(out, checkRepository(ctx, nil, o, nil))
		}
		return out
	}
	c, err := newClient(cfg)
	if err != nil {
		return append(out, fail("%v", err))
	}
	fs, dep := checkInstallation(ctx, c, o.Namespace, o.Version)
	out = append(out, fs...)
	if o.Repo == "" && dep == nil {
		// No repository to check: the agent's Deployment names it.
		return out
	}
	return append(out, checkRepository(ctx, c, o, dep))
}

// Failed tells whether any finding failed.
func Failed(fs []Finding) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return !f.OK })
}

func pass(format string, args ...any) Finding {
	return Finding{OK: true, Message: fmt.Sprintf(format, args...)}
}

func fail(format string, args ...any) Finding {
	return Finding{Message: fmt.Sprintf(format, args...)}
}

func checkKubernetesVersion(v string) Finding {
	have, err := utilversion.ParseGeneric(v)
	if err != nil {
		return fail("Kubernetes %s: not a version: %v", v, err)
	}
	if !have.AtLeast(utilversion.MustParseGeneric(MinKubernetes)) {
		return fail("Kubernetes %s is older than %s, the oldest Styrmin supports (ValidatingAdmissionPolicy v1): upgrade the cluster", v, MinKubernetes)
	}
	return pass("Kubernetes %s (at least %s)", v, MinKubernetes)
}

// checkInstallation checks the objects Render makes, and returns the
// agent's Deployment when it exists.
func checkInstallation(ctx context.Context, c client.Client, ns, self string) ([]Finding, *appsv1.Deployment) {
	objs, err := manifests(ns)
	if err != nil {
		return []Finding{fail("%v", err)}, nil
	}
	dep, err := readAgent(ctx, c, ns)
	// The installation's choice of the default environment's binding (an
	// agent installed before the choice was recorded bound it).
	clusterWide := dep == nil || dep.Annotations[AnnotationDefaultEnvironmentClusterWide] != "false"
	var out []Finding
	for _, u := range objs {
		switch {
		case isCRD(u):
			out = append(out, checkCRD(ctx, c, u, self))
		case u.GetKind() == "Deployment":
		case isDefaultEnvironmentBinding(u) && !clusterWide:
			out = append(out, checkLeftOut(ctx, c, u))
		default:
			out = append(out, checkPresent(ctx, c, u))
		}
	}
	if err != nil {
		what := fmt.Sprintf("%v", err)
		if apierrors.IsNotFound(err) {
			what = fmt.Sprintf("agent Deployment %s/%s not found (run styrminctl install)", ns, agentDeployment)
		}
		return append(out, fail("%s", what), checkSources(ctx, c, ns)), nil
	}
	return append(out, checkAgent(dep), checkSources(ctx, c, ns)), dep
}

// checkCRD checks that want's CRD is established, serves each version
// want serves, stores at want's storage version, and defines each of
// them as want does (schema, subresources, printer columns): a CRD left
// at an older schema (Helm installs crds/ only once) is established, but
// the API server prunes every field it does not know from what the agent
// writes. self is this build's version.
func checkCRD(ctx context.Context, c client.Client, want *unstructured.Unstructured, self string) Finding {
	var exp apiextensionsv1.CustomResourceDefinition
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(want.Object, &exp); err != nil {
		return fail("CRD %s: embedded definition: %v", want.GetName(), err)
	}
	var live apiextensionsv1.CustomResourceDefinition
	if err := c.Get(ctx, client.ObjectKey{Name: exp.Name}, &live); err != nil {
		if apierrors.IsNotFound(err) {
			return fail("CRD %s not found (run styrminctl install)", exp.Name)
		}
		return fail("CRD %s: %v", exp.Name, err)
	}
	if ok, why := established(&live); !ok {
		return fail("CRD %s not established: %s (see kubectl describe crd %s)", exp.Name, why, exp.Name)
	}
	var served []string
	for _, v := range exp.Spec.Versions {
		if !v.Served {
			continue
		}
		i := slices.IndexFunc(live.Spec.Versions, func(l apiextensionsv1.CustomResourceDefinitionVersion) bool { return l.Name == v.Name })
		if i < 0 || !live.Spec.Versions[i].Served {
			return fail("CRD %s does not serve %s, which this styrminctl expects (run styrminctl install to upgrade it)", exp.Name, v.Name)
		}
		if v.Storage && !live.Spec.Versions[i].Storage {
			return fail("CRD %s stores another version than %s, which this styrminctl expects (run styrminctl install to upgrade it)", exp.Name, v.Name)
		}
		if where := definitionDiff(v, live.Spec.Versions[i]); where != "" {
			by := live.Annotations[operator.AnnotationCRDVersion]
			if operator.NewerVersion(by, self) {
				return fail("CRD %s: its %s definition differs from this styrminctl's (%s) at %s: it was applied by %s (annotation %s), which is newer; check with a styrminctl of that version",
					exp.Name, v.Name, self, where, by, operator.AnnotationCRDVersion)
			}
			if by == "" {
				by = "an unrecorded version (no annotation " + operator.AnnotationCRDVersion + ": Helm's crds/, kubectl apply, or an older styrminctl)"
			}
			return fail("CRD %s: its %s schema differs from this version's (%s) at %s; it was applied by %s. The API server prunes the fields this version writes that the old schema lacks: "+
				"update the CRDs with styrminctl install, or kubectl apply --server-side -f charts/styrmin-agent/crds/ of this version",
				exp.Name, v.Name, self, where, by)
		}
		served = append(served, v.Name)
	}
	return pass("CRD %s established, serving %s, schema as this version's", exp.Name, strings.Join(served, ", "))
}

// definitionDiff is the first path where the live version of a CRD
// defines its objects otherwise than want ("" when they agree): its
// schema, subresources and printer columns, compared as JSON values, so
// that what the API server normalises (key order, number forms) counts
// for nothing.
func definitionDiff(want, live apiextensionsv1.CustomResourceDefinitionVersion) string {
	def := func(v apiextensionsv1.CustomResourceDefinitionVersion) any {
		var schema *apiextensionsv1.JSONSchemaProps
		if v.Schema != nil {
			schema = v.Schema.OpenAPIV3Schema
		}
		return jsonValue(map[string]any{
			"schema":                   schema,
			"subresources":             v.Subresources,
			"additionalPrinterColumns": v.AdditionalPrinterColumns,
			"selectableFields":         v.SelectableFields,
		})
	}
	return firstDiff("", def(want), def(live))
}

// jsonValue is v as encoding/json decodes its encoding (nil on an error).
func jsonValue(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil
	}
	return out
}

// firstDiff is the first path, in key order, where a and b differ ("" when
// equal); path is where they are.
func firstDiff(path string, a, b any) string {
	at := func(p string) string {
		if p == "" {
			return "the top"
		}
		return p
	}
	switch av := a.(type) {
	case map[string]any:
		bv, ok := b.(map[string]any)
		if !ok {
			return at(path)
		}
		keys := make([]string, 0, len(av)+len(bv))
		for k := range av {
			keys = append(keys, k)
		}
		for k := range bv {
			if _, ok := av[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			if d := firstDiff(p, av[k], bv[k]); d != "" {
				return d
			}
		}
		return ""
	case []any:
		bv, ok := b.([]any)
		if !ok {
			return at(path)
		}
		for i := range max(len(av), len(bv)) {
			if i >= len(av) || i >= len(bv) {
				return fmt.Sprintf("%s[%d]", path, i)
			}
			if d := firstDiff(fmt.Sprintf("%s[%d]", path, i), av[i], bv[i]); d != "" {
				return d
			}
		}
		return ""
	default:
		if !equality.Semantic.DeepEqual(a, b) {
			return at(path)
		}
		return ""
	}
}

// checkPresent checks that want's object exists.
func checkPresent(ctx context.Context, c client.Client, want *unstructured.Unstructured) Finding {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(want.GroupVersionKind())
	err := c.Get(ctx, client.ObjectKeyFromObject(want), live)
	switch {
	case apierrors.IsNotFound(err):
		return fail("%s not found (run styrminctl install)", Describe(want))
	case err != nil:
		return fail("%s: %v", Describe(want), err)
	}
	return pass("%s", Describe(want))
}

// checkLeftOut checks that want's object, which the installation chose to
// leave out, is absent: present, it grants what the choice withholds.
func checkLeftOut(ctx context.Context, c client.Client, want *unstructured.Unstructured) Finding {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(want.GroupVersionKind())
	err := c.Get(ctx, client.ObjectKeyFromObject(want), live)
	switch {
	case apierrors.IsNotFound(err):
		return pass("%s absent, as installed (--default-environment-cluster-wide=false): RoleBindings of ClusterRole %s grant the default environment's rights where it acts (docs/tenancy.md)",
			Describe(want), defaultEnvironment)
	case err != nil:
		return fail("%s: %v", Describe(want), err)
	}
	return fail("%s exists, though installed with --default-environment-cluster-wide=false: the agent may change every namespace as the default environment; delete it (kubectl delete clusterrolebinding %s) once RoleBindings grant the role where the default acts",
		Describe(want), want.GetName())
}

// checkAgent passes when the agent's rollout is complete, as kubectl
// rollout status tells it: ready replicas alone would count the old pods
// of a failed upgrade while the new ReplicaSet crashloops.
func checkAgent(dep *appsv1.Deployment) Finding {
	in := agentInfo(dep)
	pending := rolloutPending(dep, in.Replicas)
	if in.ReadyReplicas == 0 && pending == "" {
		pending = "no replica runs"
	}
	if pending != "" {
		return fail("agent Deployment %s: %d/%d replicas ready, image %s; rollout not complete: %s (see kubectl -n %s rollout status deployment/%s, kubectl -n %s describe deployment %s, and the agent's log)",
			in.Deployment, in.ReadyReplicas, in.Replicas, in.Image, pending, dep.Namespace, dep.Name, dep.Namespace, dep.Name)
	}
	return pass("agent Deployment %s: %d/%d replicas ready, updated and available, image %s", in.Deployment, in.ReadyReplicas, in.Replicas, in.Image)
}

// rolloutPending says what dep's rollout of its current template still
// waits for ("" when complete), in kubectl rollout status's order, with
// the Progressing condition when it failed.
func rolloutPending(dep *appsv1.Deployment, want int32) string {
	st := dep.Status
	var why string
	switch {
	case st.ObservedGeneration < dep.Generation:
		why = fmt.Sprintf("the Deployment controller has not observed generation %d yet (observed %d)", dep.Generation, st.ObservedGeneration)
	case st.UpdatedReplicas < want:
		why = fmt.Sprintf("%d of %d replicas run the current template", st.UpdatedReplicas, want)
	case st.Replicas > st.UpdatedReplicas:
		why = fmt.Sprintf("%d old replicas pending termination", st.Replicas-st.UpdatedReplicas)
	case st.AvailableReplicas < want:
		why = fmt.Sprintf("%d of %d updated replicas available", st.AvailableReplicas, want)
	default:
		return ""
	}
	for _, c := range st.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse {
			why += fmt.Sprintf(" (%s: %s)", c.Reason, c.Message)
		}
	}
	return why
}

// checkSources checks the StyrminSources of the agent's namespace: the
// agent's sync with the repository.
func checkSources(ctx context.Context, c client.Reader, ns string) Finding {
	var list v1alpha1.StyrminSourceList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return fail("StyrminSources in %s: %v", ns, err)
	}
	if len(list.Items) == 0 {
		return fail("no StyrminSource in %s: the agent has not synced yet (is it running? kubectl -n %s logs deployment/%s)", ns, ns, agentDeployment)
	}
	var bad, good []string
	for _, src := range list.Items {
		fetched := src.Status.LastFetchedCommit
		if len(fetched) > 12 {
			fetched = fetched[:12]
		}
		when := "never"
		if src.Status.LastSyncTime != nil {
			when = src.Status.LastSyncTime.UTC().Format(time.RFC3339)
		}
		cond := apimeta.FindStatusCondition(src.Status.Conditions, v1alpha1.ConditionReady)
		switch {
		case cond == nil:
			bad = append(bad, fmt.Sprintf("StyrminSource %s/%s has no Ready condition yet", ns, src.Name))
		case cond.Status != metav1.ConditionTrue:
			bad = append(bad, fmt.Sprintf("StyrminSource %s/%s not Ready: %s: %s (last sync %s)", ns, src.Name, cond.Reason, cond.Message, when))
		default:
			good = append(good, fmt.Sprintf("StyrminSource %s/%s Ready: fetched %s, last sync %s", ns, src.Name, fetched, when))
		}
	}
	if len(bad) > 0 {
		return fail("%s", strings.Join(bad, "; "))
	}
	return pass("%s", strings.Join(good, "; "))
}

// checkRepository lists the repository's refs with its credentials: the
// token given, else the Secret the agent's Deployment names.
func checkRepository(ctx context.Context, c client.Reader, o CheckOptions, dep *appsv1.Deployment) Finding {
	url, branch, secret, secretNS := o.Repo, o.Branch, "", o.Namespace
	if dep != nil {
		args := agentArgs(dep)
		if url == "" {
			url = argValue(args, "repo")
		}
		if branch == "" && o.Repo == "" {
			branch = argValue(args, "branch")
		}
		secret = argValue(args, "repo-secret")
		if ns := argValue(args, "repo-secret-namespace"); ns != "" {
			secretNS = ns
		}
	}
	if url == "" {
		return fail("repository: none to check: the agent's Deployment has no --repo (pass --repo)")
	}
	shown := gitsource.PublicURL(url)
	auth := gitsource.Auth{Token: o.Token}
	from := "the token in STYRMIN_GIT_TOKEN"
	switch {
	case o.Token != "":
	case secret != "" && c != nil:
		key := types.NamespacedName{Namespace: secretNS, Name: secret}
		a, err := operator.AuthFromSecret(ctx, c, key)
		if apierrors.IsNotFound(err) {
			return fail("repository %s: %v (create it: kubectl -n %s create secret generic %s --from-literal=token=…, or set STYRMIN_GIT_TOKEN)",
				shown, err, key.Namespace, key.Name)
		}
		if err != nil {
			return fail("repository %s: %v (or set STYRMIN_GIT_TOKEN)", shown, err)
		}
		auth, from = a, "the credentials in Secret "+key.String()
	default:
		from = "no credentials"
	}
	ctx, cancel := context.WithTimeout(ctx, o.GitTimeout)
	defer cancel()
	head, err := gitsource.RemoteHead(ctx, url, branch, auth)
	if branch == "" {
		branch = "HEAD"
	}
	if err != nil {
		hint := "check the URL and the network"
		switch {
		case errors.Is(err, gitsource.ErrAuth):
			hint = "check " + from
		case errors.Is(err, gitsource.ErrBranchNotFound):
			hint = "check the branch (--branch)"
		}
		return fail("repository %s unreachable with %s: %v (%s)", shown, from, err, hint)
	}
	return pass("repository %s reachable with %s: %s at %s", shown, from, branch, head.Short())
}
