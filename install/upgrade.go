package install

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/version"
)

// Installed is what Inspect finds of an installation.
type Installed struct {
	// Agent is the agent's Deployment (nil when there is none).
	Agent *appsv1.Deployment
	// CRDVersions maps each styrmin.io CRD present to the version that
	// applied it (its operator.AnnotationCRDVersion; "" when none: Helm's
	// crds/, kubectl or a build before the annotation).
	CRDVersions map[string]string
	// SecretNames are the Secrets the agent's Role styrmin-agent-secrets
	// grants by name (none when there is no such Role).
	SecretNames []string
	// OtherSecretsRoleRules describe that Role's rules install does not
	// make (get of Secrets by name): an upgrade applies the Role whole,
	// so they are replaced, and PlanUpgrade says so.
	OtherSecretsRoleRules []string
}

// Inspect reads the agent's Deployment in namespace ns and Styrmin's CRDs.
// Nothing found is no error: an empty Installed.
func Inspect(ctx context.Context, cfg *rest.Config, ns string) (*Installed, error) {
	c, err := newClient(cfg)
	if err != nil {
		return nil, err
	}
	in := &Installed{CRDVersions: map[string]string{}}
	dep, err := readAgent(ctx, c, ns)
	switch {
	case err == nil:
		in.Agent = dep
	case !apierrors.IsNotFound(err):
		return nil, err
	}
	if in.SecretNames, in.OtherSecretsRoleRules, err = roleSecretNames(ctx, c, ns); err != nil {
		return nil, err
	}
	names, err := crdNames()
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		var crd apiextensionsv1.CustomResourceDefinition
		err := c.Get(ctx, client.ObjectKey{Name: name}, &crd)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("reading CRD %s: %w", name, err)
		default:
			in.CRDVersions[name] = crd.Annotations[operator.AnnotationCRDVersion]
		}
	}
	return in, nil
}

// roleSecretNames are the Secrets the Role styrmin-agent-secrets in
// namespace ns grants by name, in its order (nil when it is absent).
func roleSecretNames(ctx context.Context, c client.Reader, ns string) (names, others []string, err error) {
	var role rbacv1.Role
	err = c.Get(ctx, client.ObjectKey{Namespace: ns, Name: secretsRole}, &role)
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("reading the agent's Role %s/%s: %w", ns, secretsRole, err)
	}
	for _, r := range role.Rules {
		if !slices.Equal(r.APIGroups, []string{""}) || !slices.Equal(r.Resources, []string{"secrets"}) || !slices.Equal(r.Verbs, []string{"get"}) ||
			len(r.ResourceNames) == 0 || len(r.NonResourceURLs) > 0 {
			others = append(others, describeRule(r))
		}
		if !slices.Contains(r.Resources, "secrets") {
			continue
		}
		for _, n := range r.ResourceNames {
			if !slices.Contains(names, n) {
				names = append(names, n)
			}
		}
	}
	return names, others, nil
}

// describeRule says what a policy rule grants, as kubectl describe does:
// verbs on resources (of groups, by name).
func describeRule(r rbacv1.PolicyRule) string {
	what := strings.Join(r.Resources, ",")
	if len(r.NonResourceURLs) > 0 {
		what = strings.Join(r.NonResourceURLs, ",")
	}
	if g := strings.Join(r.APIGroups, ","); g != "" {
		what += "." + g
	}
	if len(r.ResourceNames) > 0 {
		what += " (" + strings.Join(r.ResourceNames, ", ") + ")"
	}
	return strings.Join(r.Verbs, ",") + " " + what
}

// agentVersion is the installed agent's version: its LabelVersion, else
// its image's tag, as styrminctl version reads it ("" when neither).
func agentVersion(dep *appsv1.Deployment) string {
	if v := dep.Labels[LabelVersion]; v != "" {
		return v
	}
	return agentInfo(dep).Tag
}

// UpgradeOptions tune PlanUpgrade.
type UpgradeOptions struct {
	// AllowDowngrade installs even when what is installed is newer than
	// this build, or this build has no release version to tell.
	AllowDowngrade bool
	// Given tells whether the user set one of install's flags ("image",
	// "branch", "path", "secret-name",
	// "default-environment-cluster-wide"); a flag not given keeps the
	// installed agent's setting. nil: none given.
	Given func(flag string) bool
}

// Upgrade is what PlanUpgrade decided.
type Upgrade struct {
	// Options are the options to Render.
	Options Options
	// Notes say, one line each, what of the installed agent is kept and
	// what changes: its version, image and arguments.
	Notes []string
}

// DowngradeError refuses to install over an installation newer than this
// build (or one this build cannot order, having no release version).
type DowngradeError struct {
	// Version is this build's version.
	Version string
	// Newer names what is newer, with the version that installed it.
	Newer []string
	// Newest is the newest of those versions.
	Newest string
}

func (e *DowngradeError) Error() string {
	what := strings.Join(e.Newer, ", ")
	if _, ok := operator.CompareVersions(e.Version, e.Version); !ok { // this build has no version to order
		return fmt.Sprintf("refusing to install: this styrminctl (%s) has no release version, so it cannot tell whether it is older than what is installed: %s; nothing was applied. "+
			"Use a released styrminctl at least as new as %s, or pass --allow-downgrade to install this build's CRDs and agent anyway", e.Version, what, e.Newest)
	}
	return fmt.Sprintf("refusing to downgrade Styrmin from %s to %s: %s installed by a newer version than this styrminctl; nothing was applied. "+
		"Use styrminctl %s or newer, or pass --allow-downgrade to install %s's CRDs and agent anyway (the API server then prunes the fields only the newer schemas know)",
		e.Newest, e.Version, what, e.Newest, e.Version)
}

// PlanUpgrade prepares o for the installation in: it refuses with a
// *DowngradeError when the agent (its LabelVersion, else its image tag)
// or a CRD (its operator.AnnotationCRDVersion) was installed by a newer
// version than o.Version (default this build's), unless
// u.AllowDowngrade. Over an installed agent it keeps:
//   - the image, when o.Image is empty, unless this build is a newer
//     release (the upgrade: DefaultImage of this version) or an older one
//     allowed to downgrade: a build without a release version never
//     changes the image by itself;
//   - --branch, --path and --repo-secret and the choice of the default
//     environment's binding, for the flags u.Given says were not set;
//   - every argument install does not manage (--lock-mode, --lock-secret,
//     --ui-bind-address, --report-statuses, …), in o.ExtraArgs.
//   - the Deployment's replicas and the agent container's resources, in
//     o.Replicas and o.Resources (install has no flags for them).
//   - the Secrets its Role styrmin-agent-secrets grants (names an
//     administrator added, an environment's backup credentials), in
//     o.ExtraSecretNames; Render grants those the kept arguments name
//     (--lock-secret, --status-secret, …) of itself.
//
// Its Notes say what it kept and what changes.
func PlanUpgrade(o Options, in *Installed, u UpgradeOptions) (Upgrade, error) {
	if o.Version == "" {
		o.Version = version.Get().Short()
	}
	self := o.Version
	if in == nil {
		return Upgrade{Options: o}, nil
	}
	given := u.Given
	if given == nil {
		given = func(string) bool { return false }
	}
	var newer []string
	newest := ""
	consider := func(what, v string) {
		if !operator.NewerVersion(v, self) {
			return
		}
		newer = append(newer, fmt.Sprintf("%s (%s)", what, v))
		if c, ok := operator.CompareVersions(v, newest); newest == "" || (ok && c > 0) {
			newest = v
		}
	}
	live := ""
	if in.Agent != nil {
		live = agentVersion(in.Agent)
		consider("agent Deployment "+in.Agent.Namespace+"/"+in.Agent.Name, live)
	}
	names := make([]string, 0, len(in.CRDVersions))
	for name := range in.CRDVersions {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		consider("CRD "+name, in.CRDVersions[name])
	}
	var notes []string
	if len(newer) > 0 {
		if !u.AllowDowngrade {
			return Upgrade{}, &DowngradeError{Version: self, Newer: newer, Newest: newest}
		}
		notes = append(notes, fmt.Sprintf("downgrading (--allow-downgrade): %s, to %s", strings.Join(newer, ", "), self))
	}
	if in.Agent == nil {
		return Upgrade{Options: o, Notes: notes}, nil
	}
	dep := in.Agent
	liveArgs := agentArgs(dep)
	keep := func(flag, arg string, into *string, dflt string) (absent bool) {
		if given(flag) {
			return false
		}
		v := liveArg(liveArgs, arg)
		if v == "" {
			return true
		}
		if cur := *into; v != cur && !(cur == "" && v == dflt) {
			notes = append(notes, fmt.Sprintf("kept the agent's --%s=%s (pass --%s to change it)", arg, v, flag))
		}
		*into = v
		return false
	}
	// An agent without --branch or --repo-secret (the chart's
	// repository.branch: "" or repository.secret.name: "") stays so:
	// install's defaults would switch its branch or name a Secret that
	// does not exist.
	if keep("branch", "branch", &o.Branch, DefaultBranch) {
		o.NoBranch, o.Branch = true, ""
		notes = append(notes, "kept the agent without --branch: it follows the remote's HEAD (pass --branch to set one)")
	}
	keep("path", "path", &o.Path, "")
	if keep("secret-name", "repo-secret", &o.SecretName, DefaultSecretName) {
		o.NoSecret, o.SecretName = true, ""
		notes = append(notes, "kept the agent without --repo-secret: it reads the repository without credentials (pass --secret-name to set one)")
	}
	if !given("default-environment-cluster-wide") && dep.Annotations[AnnotationDefaultEnvironmentClusterWide] == "false" && !o.WithoutDefaultEnvironmentBinding {
		o.WithoutDefaultEnvironmentBinding = true
		notes = append(notes, "kept --default-environment-cluster-wide=false, as installed: ClusterRoleBinding "+defaultEnvironment+" stays out (pass --default-environment-cluster-wide to change it)")
	}

	if liveImage := agentInfo(dep).Image; o.Image == "" && liveImage != "" {
		cmp, ok := operator.CompareVersions(self, live)
		upgrading := ok && (cmp > 0 || cmp < 0 && u.AllowDowngrade)
		target, why := upgradeImage(liveImage, live, self)
		switch {
		case upgrading && target != "":
			o.Image = target
			if target != liveImage {
				notes = append(notes, fmt.Sprintf("agent image %s → %s (%s → %s)", liveImage, target, live, self))
			}
		case upgrading && why != "":
			// A digest, or a tag that is not the agent's version: no
			// image of self can be told from it, and the published one
			// may not be reachable (an air-gapped mirror).
			o.Image = liveImage
			notes = append(notes, fmt.Sprintf("the agent runs %s (%s): pass --image to change it", liveImage, why))
		default:
			o.Image = liveImage
			if DefaultImage(version.Info{Version: self}) != liveImage {
				notes = append(notes, fmt.Sprintf("kept the agent's image %s (pass --image to change it)", liveImage))
			}
		}
	}

	managed := managedFlags()
	var extra, extraShown []string
	for _, g := range argGroups(liveArgs) {
		if name := flagName(g[0]); name != "" && managed[name] {
			continue
		}
		extra = append(extra, g...)
		extraShown = append(extraShown, strings.Join(g, " "))
	}
	o.ExtraArgs = append(extra, o.ExtraArgs...)
	if len(extraShown) > 0 {
		notes = append(notes, "kept the agent's arguments install does not set: "+strings.Join(extraShown, " "))
	}
	o, kept, err := keepSecrets(o, in.SecretNames)
	if err != nil {
		return Upgrade{}, err
	}
	if len(kept) > 0 {
		notes = append(notes, fmt.Sprintf("kept the Secrets Role %s grants besides the agent's own: %s (kubectl edit role %s to take one away)", secretsRole, strings.Join(kept, ", "), secretsRole))
	}
	if len(in.OtherSecretsRoleRules) > 0 {
		notes = append(notes, fmt.Sprintf("Role %s holds rules install does not make, which the upgrade replaces: %s; grant them in a Role of your own",
			secretsRole, strings.Join(in.OtherSecretsRoleRules, "; ")))
	}
	o, kept, err = keepScale(o, dep)
	if err != nil {
		return Upgrade{}, err
	}
	notes = append(notes, kept...)
	objs, err := Render(o)
	if err != nil {
		return Upgrade{}, err
	}
	_, newArgs := renderedAgent(objs)
	notes = append(notes, argChanges(liveArgs, newArgs, managed)...)
	return Upgrade{Options: o, Notes: notes}, nil
}

// keepSecrets adds to o.ExtraSecretNames the names of live (the Secrets
// the installed Role grants) that Render would not grant of itself, and
// returns them: the Role's rules are applied whole, so a Secret an
// administrator granted (an environment's backup credentials) or an agent
// argument needs would otherwise be taken away by the upgrade.
func keepSecrets(o Options, live []string) (Options, []string, error) {
	if len(live) == 0 {
		return o, nil, nil
	}
	objs, err := Render(o)
	if err != nil {
		return o, nil, err
	}
	own := grantedSecrets(objs)
	var kept []string
	for _, name := range live {
		if !slices.Contains(own, name) && !slices.Contains(kept, name) {
			kept = append(kept, name)
		}
	}
	o.ExtraSecretNames = append(slices.Clone(o.ExtraSecretNames), kept...)
	return o, kept, nil
}

// keepScale keeps, in o, the agent's replicas and its container's
// resources where they were set by hand (kubectl scale, kubectl edit, the
// chart's values): a fleet's agent given more memory must not lose it to
// an upgrade, which would apply the manifest's 256Mi limit to an agent
// that needs more. What the installed manifest set (AnnotationManifestScale,
// recorded by Render) is not kept, so a release that changes it applies.
// An agent without that record (installed by the chart, or an older
// styrminctl) keeps whatever differs from this manifest. The notes say
// what was kept.
func keepScale(o Options, dep *appsv1.Deployment) (Options, []string, error) {
	o.Replicas, o.Resources = nil, nil
	objs, err := Render(o)
	if err != nil {
		return o, nil, err
	}
	var manifest appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(objs, "Deployment", agentDeployment).Object, &manifest); err != nil {
		return o, nil, fmt.Errorf("render: Deployment %s: %w", agentDeployment, err)
	}
	// What the installed manifest set: its record, decoded afresh (into
	// this manifest's maps it would merge with keys only this one has),
	// else this manifest's.
	installed := manifestScale{Replicas: replicasOf(&manifest)}
	if c := agentContainerOf(&manifest); c != nil {
		installed.Resources = *c.Resources.DeepCopy()
	}
	recorded := false
	if v := dep.Annotations[AnnotationManifestScale]; v != "" {
		var rec manifestScale
		if json.Unmarshal([]byte(v), &rec) == nil {
			installed, recorded = rec, true
		}
	}
	var notes []string
	if r, m := replicasOf(dep), replicasOf(&manifest); r != installed.Replicas || (!recorded && r != m) {
		o.Replicas = &r
		if r != m {
			notes = append(notes, fmt.Sprintf("kept the agent's replicas: %d (the manifest's %d; kubectl scale to change it)", r, m))
		}
	}
	live, want := agentContainerOf(dep), agentContainerOf(&manifest)
	if live != nil && want != nil && !equality.Semantic.DeepEqual(live.Resources, installed.Resources) {
		o.Resources = live.Resources.DeepCopy()
		if !equality.Semantic.DeepEqual(live.Resources, want.Resources) {
			notes = append(notes, fmt.Sprintf("kept the agent's resources: %s (the manifest's %s; kubectl edit to change them)", resourcesText(live.Resources), resourcesText(want.Resources)))
		}
	}
	return o, notes, nil
}

// manifestScale is what AnnotationManifestScale records: the replicas and
// the agent container's resources of the manifest install applied.
type manifestScale struct {
	Replicas  int32                       `json:"replicas"`
	Resources corev1.ResourceRequirements `json:"resources"`
}

// replicasOf is a Deployment's replicas, 1 when unset (the API's default).
func replicasOf(dep *appsv1.Deployment) int32 {
	if dep.Spec.Replicas == nil {
		return 1
	}
	return *dep.Spec.Replicas
}

// resourcesText shows requests and limits in a line, names sorted.
func resourcesText(r corev1.ResourceRequirements) string {
	list := func(l corev1.ResourceList) string {
		names := make([]string, 0, len(l))
		for n := range l {
			names = append(names, string(n))
		}
		sort.Strings(names)
		parts := make([]string, len(names))
		for i, n := range names {
			q := l[corev1.ResourceName(n)]
			parts[i] = n + "=" + q.String()
		}
		if len(parts) == 0 {
			return "none"
		}
		return strings.Join(parts, " ")
	}
	return "requests " + list(r.Requests) + ", limits " + list(r.Limits)
}

// upgradeImage is the image of version self for an agent that runs
// image, of version live: image's repository with tag self when image is
// named by its version live (a mirror of the published images stays the
// mirror). It is "" with why "" when self has no published image (a build
// without a release version, a Go pseudo-version), and "" with why saying
// so when image is named by digest or by a tag other than live: such an
// image is kept, never swapped for the published one, which an
// air-gapped cluster cannot pull.
func upgradeImage(image, live, self string) (target, why string) {
	if !imageTag.MatchString(self) || pseudoVersion.MatchString(self) {
		return "", ""
	}
	switch tag := tagOf(image); {
	case strings.Contains(image, "@"):
		return "", "by digest"
	case tag == "":
		return "", "without a tag"
	case live == "" || tag != live:
		return "", "tag " + tag + ", not the agent's version " + live
	}
	return strings.TrimSuffix(image, ":"+live) + ":" + self, ""
}

// argChanges says which managed flags change from old to new, one line
// each, in the order of new then old.
func argChanges(old, new []string, managed map[string]bool) []string {
	values := func(args []string) (map[string][]string, []string) {
		m := map[string][]string{}
		var order []string
		for _, g := range argGroups(args) {
			name := flagName(g[0])
			if name == "" || !managed[name] {
				continue
			}
			if _, ok := m[name]; !ok {
				order = append(order, name)
			}
			m[name] = append(m[name], strings.Join(g, " "))
		}
		return m, order
	}
	was, wasOrder := values(old)
	is, isOrder := values(new)
	var out []string
	for _, name := range isOrder {
		switch {
		case was[name] == nil:
			out = append(out, fmt.Sprintf("agent argument %s added", strings.Join(is[name], " ")))
		case !slices.Equal(was[name], is[name]):
			out = append(out, fmt.Sprintf("agent argument %s replaces %s", strings.Join(is[name], " "), strings.Join(was[name], " ")))
		}
	}
	for _, name := range wasOrder {
		if is[name] == nil {
			out = append(out, fmt.Sprintf("agent argument %s removed", strings.Join(was[name], " ")))
		}
	}
	return out
}

// renderedAgent is the image and arguments of the agent in objs.
func renderedAgent(objs []*unstructured.Unstructured) (string, []string) {
	dep := find(objs, "Deployment", agentDeployment)
	if dep == nil {
		return "", nil
	}
	containers, _, _ := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	for _, c := range containers {
		if m, ok := c.(map[string]any); ok && m["name"] == agentContainer {
			args, _, _ := unstructured.NestedStringSlice(m, "args")
			image, _ := m["image"].(string)
			return image, args
		}
	}
	return "", nil
}

// liveArg is the value of flag name in args, given as --name=value or
// --name value ("" when absent or empty).
func liveArg(args []string, name string) string {
	v := ""
	for _, g := range argGroups(args) {
		if flagName(g[0]) != name {
			continue
		}
		switch _, val, ok := strings.Cut(g[0], "="); {
		case ok:
			v = val
		case len(g) > 1:
			v = g[1]
		}
	}
	return v
}

// argGroups splits arguments into flags, each with its value when given
// as the next argument ("--lock-secret", "name").
func argGroups(args []string) [][]string {
	var out [][]string
	for _, a := range args {
		if n := len(out); n > 0 && !strings.HasPrefix(a, "-") {
			if last := out[n-1]; len(last) == 1 && strings.HasPrefix(last[0], "-") && !strings.Contains(last[0], "=") {
				out[n-1] = append(last, a)
				continue
			}
		}
		out = append(out, []string{a})
	}
	return out
}

// flagName is the name of the flag arg sets ("" when arg is no flag).
func flagName(arg string) string {
	if !strings.HasPrefix(arg, "-") {
		return ""
	}
	name, _, _ := strings.Cut(strings.TrimLeft(arg, "-"), "=")
	return name
}

// managedFlags are the agent flags install sets: those of the embedded
// Deployment and those of Options.
var managedFlags = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{"cluster": true, "repo": true, "branch": true, "path": true, "repo-secret": true}
	objs, err := parse(config.AgentDeployment())
	if err != nil {
		panic(fmt.Sprintf("install: the embedded agent Deployment: %v", err))
	}
	_, args := renderedAgent(objs)
	for _, a := range args {
		if name := flagName(a); name != "" {
			m[name] = true
		}
	}
	return m
})

// crdNames are the names of the embedded CRDs.
func crdNames() ([]string, error) {
	var names []string
	for _, doc := range config.CRDs() {
		objs, err := parse(doc)
		if err != nil {
			return nil, fmt.Errorf("embedded CRD: %w", err)
		}
		for _, u := range objs {
			names = append(names, u.GetName())
		}
	}
	return names, nil
}
