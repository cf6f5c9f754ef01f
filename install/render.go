package install

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/config"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/version"
)

// Defaults of Options.
const (
	DefaultNamespace  = config.AgentNamespace
	DefaultBranch     = "main"
	DefaultSecretName = "styrmin-repo"
	// ImageRepository is where the agent's images are published.
	ImageRepository = config.AgentImage
	// FieldManager is the server-side apply field manager of Apply.
	FieldManager = "styrminctl"
	// LabelVersion is the label Render puts on the agent's Deployment:
	// the version of the styrminctl that installed it.
	LabelVersion = "app.kubernetes.io/version"
	// AnnotationManifestScale on the agent's Deployment records the
	// replicas and the agent container's resources of the manifest install
	// applied (JSON), so a later install tells those set by hand, which it
	// keeps, from the manifest's, which a new release may change.
	AnnotationManifestScale = "styrmin.io/manifest-scale"
	// AnnotationDefaultEnvironmentClusterWide on the agent's Deployment
	// records whether Render bound the default environment's role
	// cluster-wide ("true") or left the binding out ("false"), so Check
	// knows whether its absence is a fault.
	AnnotationDefaultEnvironmentClusterWide = "styrmin.io/default-environment-cluster-wide"
)

// The agent's objects in the manifests.
const (
	agentDeployment = "styrmin-agent"
	agentContainer  = "agent"
	// agentUserVariable is the variable of the admission policy naming the
	// agent's user.
	agentUserVariable = "isAgent"
	// defaultEnvironment is the ClusterRole of what the agent may change
	// for environments without a service account, and the name of the
	// ClusterRoleBinding that grants it in every namespace
	// (config/rbac/default_environment_role*.yaml).
	defaultEnvironment = "styrmin-agent-default-environment"
)

// Options are the settings of an installation.
type Options struct {
	// Cluster is the name of the cluster (locks/<cluster>/…); required.
	Cluster string
	// Repo is the desired-state repository's URL; required, without
	// credentials (they go in the Secret).
	Repo string
	// Branch is the branch the agent follows (default DefaultBranch).
	Branch string
	// Path is the folder of the git repository holding the desired-state
	// repository ("": its root).
	Path string
	// SecretName names the Secret, in Namespace, with the repository's
	// credentials (default DefaultSecretName).
	SecretName string
	// Namespace is the agent's namespace (default DefaultNamespace).
	Namespace string
	// Image is the agent's image (default DefaultImage(version.Get())).
	Image string
	// Version is stamped on the Deployment as LabelVersion when it is a
	// valid label value (default version.Get().Short()).
	Version string
	// WithoutDefaultEnvironmentBinding leaves out the ClusterRoleBinding
	// of styrmin-agent-default-environment (the ClusterRole stays), as
	// the chart's rbac.defaultEnvironmentClusterWide: false: for strict
	// tenancy, where RoleBindings grant that role in chosen namespaces
	// (docs/tenancy.md). Recorded on the Deployment
	// (AnnotationDefaultEnvironmentClusterWide).
	WithoutDefaultEnvironmentBinding bool
	// NoBranch leaves --branch out, Branch ignored: the agent follows the
	// remote's HEAD (the chart's repository.branch: ""). PlanUpgrade sets
	// it over an agent without --branch when --branch is not given.
	NoBranch bool
	// NoSecret leaves --repo-secret out, SecretName ignored: the agent
	// reads a public repository without credentials (the chart's
	// repository.secret.name: ""). PlanUpgrade sets it over an agent
	// without --repo-secret when --secret-name is not given.
	NoSecret bool
	// ExtraArgs are agent arguments install does not manage (the
	// README's --lock-mode, --ui-bind-address, …), added after the
	// manifest's: PlanUpgrade carries over those of the installed agent.
	// An argument of a flag install manages is refused.
	ExtraArgs []string
	// Replicas, when set, replaces the manifest's replicas of the agent's
	// Deployment: PlanUpgrade keeps the installed agent's (kubectl scale).
	Replicas *int32
	// Resources, when set, replaces the manifest's requests and limits of
	// the agent's container: PlanUpgrade keeps the installed agent's, so
	// a memory limit raised for a larger fleet survives an upgrade.
	Resources *corev1.ResourceRequirements
	// ExtraSecretNames are Secrets of Namespace the agent may read besides
	// those its arguments name, which Role styrmin-agent-secrets grants
	// anyway: the credentials Secrets environments name for their backups
	// (the chart's rbac.extraSecretNames). PlanUpgrade adds those the
	// installed Role grants, so a name an administrator added stays.
	ExtraSecretNames []string
}

func (o Options) withDefaults() Options {
	switch {
	case o.NoBranch:
		o.Branch = ""
	case o.Branch == "":
		o.Branch = DefaultBranch
	}
	switch {
	case o.NoSecret:
		o.SecretName = ""
	case o.SecretName == "":
		o.SecretName = DefaultSecretName
	}
	if o.Namespace == "" {
		o.Namespace = DefaultNamespace
	}
	if o.Version == "" {
		o.Version = version.Get().Short()
	}
	if o.Image == "" {
		o.Image = DefaultImage(version.Get())
	}
	return o
}

func (o Options) validate() error {
	var errs []error
	if o.Cluster == "" {
		errs = append(errs, errors.New("the cluster name is required (--cluster)"))
	}
	if o.Repo == "" {
		errs = append(errs, errors.New("the repository URL is required (--repo)"))
	}
	if err := CheckValues(o); err != nil {
		errs = append(errs, err)
	} else if o.Repo != "" && gitsource.PublicURL(o.Repo) != o.Repo {
		errs = append(errs, errors.New("the repository URL holds credentials: give the URL without them and put the token in the Secret"))
	}
	for _, e := range validation.IsDNS1123Label(o.Namespace) {
		errs = append(errs, fmt.Errorf("namespace %q: %s", o.Namespace, e))
	}
	if !o.NoSecret {
		for _, e := range validation.IsDNS1123Subdomain(o.SecretName) {
			errs = append(errs, fmt.Errorf("secret name %q: %s", o.SecretName, e))
		}
	}
	if strings.HasPrefix(o.Path, "/") || strings.Contains("/"+o.Path+"/", "/../") {
		errs = append(errs, fmt.Errorf("path %q: must be a folder inside the repository", o.Path))
	}
	for _, name := range o.ExtraSecretNames {
		for _, e := range validation.IsDNS1123Subdomain(name) {
			errs = append(errs, fmt.Errorf("--extra-secret-names: secret name %q: %s", name, e))
		}
	}
	managed := managedFlags()
	for _, a := range o.ExtraArgs {
		if name := flagName(a); name != "" && managed[name] {
			errs = append(errs, fmt.Errorf("extra agent argument %s: install sets --%s itself", a, name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("install options: %w", err)
	}
	return nil
}

// CheckValues checks the values given for --cluster, --repo, --branch and
// --image (each only when set), so that styrminctl install refuses them
// before it reads the cluster, renders or applies anything: the agent
// would otherwise start with a cluster whose folder the resolver refuses,
// a URL or branch git cannot fetch, or an image the kubelet cannot pull,
// and fail only at run time. Each error names the flag and what was
// expected.
func CheckValues(o Options) error {
	var errs []error
	if o.Cluster != "" && !resolver.IsName(o.Cluster) {
		errs = append(errs, fmt.Errorf("--cluster %q: expected a cluster name: a lowercase DNS label (a-z, 0-9, '-', starting and ending with a letter or digit) of at most %d characters, as the cluster's folder in the repository", o.Cluster, resolver.MaxNameLen))
	}
	if o.Repo != "" && !repoURL(o.Repo) {
		errs = append(errs, fmt.Errorf("--repo %q: expected a repository URL: https://HOST/PATH, http://HOST/PATH, ssh://[USER@]HOST/PATH, USER@HOST:PATH or file:///PATH", o.Repo))
	}
	if o.Branch != "" && !branchName(o.Branch) {
		errs = append(errs, fmt.Errorf("--branch %q: expected a branch name valid as a git ref (no spaces or control characters, none of ~^:?*[\\, not starting with '-' or '/', no '..', '//' or '@{', no part starting with '.', not ending in '/', '.' or '.lock')", o.Branch))
	}
	if o.Image != "" && !imageRef.MatchString(o.Image) {
		errs = append(errs, fmt.Errorf("--image %q: expected an image reference NAME[:TAG][@DIGEST] without spaces (e.g. %s)", o.Image, shippedImage()))
	}
	return errors.Join(errs...)
}

// scpURL is git's scp-like ssh address, USER@HOST:PATH.
var scpURL = regexp.MustCompile(`^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:\S+$`)

// repoURL reports whether s is a URL git fetches from: what the agent's
// --repo takes (gitsource has no exported check).
func repoURL(s string) bool {
	if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return false
	}
	if !strings.Contains(s, "://") {
		return scpURL.MatchString(s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "https", "http", "ssh":
		return u.Host != "" && u.Path != "" && u.Path != "/"
	case "file":
		return u.Host == "" && u.Path != "" && u.Path != "/"
	}
	return false
}

// branchName reports whether s is a branch git accepts, after
// git check-ref-format: the agent fetches refs/heads/<s>.
func branchName(s string) bool {
	if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "/") || strings.HasSuffix(s, "/") ||
		strings.HasSuffix(s, ".") || strings.HasSuffix(s, ".lock") || s == "@" ||
		strings.Contains(s, "..") || strings.Contains(s, "//") || strings.Contains(s, "@{") ||
		strings.ContainsAny(s, "~^:?*[\\") {
		return false
	}
	if strings.ContainsFunc(s, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return false
	}
	for _, part := range strings.Split(s, "/") {
		if strings.HasPrefix(part, ".") || strings.HasSuffix(part, ".lock") {
			return false
		}
	}
	return true
}

// imageRef is a container image reference, NAME[:TAG][@DIGEST]: an
// optional registry host (with a port), lowercase path components, a tag
// as imageTag, a digest ALGORITHM:HEX.
var imageRef = regexp.MustCompile(`^` +
	`(?:[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?/)?` +
	`[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*` +
	`(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?` +
	`(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$`)

// imageTag is what a container image tag may be.
var imageTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// pseudoVersion ends a Go pseudo-version (v0.0.0-20261201150405-abcdef123456):
// a build of a commit, not of a release.
var pseudoVersion = regexp.MustCompile(`[-.]\d{14}-[0-9a-f]{12}$`)

// DefaultImage is the agent's image for a build of styrminctl: the
// published image of the same version, or, for a build without a release
// version ("(devel)", "(devel)-dirty", a Go pseudo-version, a version that
// is no valid tag), which has no image of its own, the released image the
// shipped manifests name (config/agent/deployment.yaml), never :latest.
func DefaultImage(v version.Info) string {
	tag := v.Short()
	if !imageTag.MatchString(tag) || pseudoVersion.MatchString(tag) {
		return shippedImage()
	}
	return ImageRepository + ":" + tag
}

// shippedImage is the released image the shipped manifests name.
func shippedImage() string { return config.AgentImage + ":" + config.AgentImageTag }

// Render returns the objects of an installation in the order to apply
// them: the CRDs (annotated operator.AnnotationCRDVersion with
// o.Version), the namespace, RBAC, the admission policy, the agent's
// Service and its Deployment.
func Render(o Options) ([]*unstructured.Unstructured, error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	objs, err := manifests(o.Namespace)
	if err != nil {
		return nil, err
	}
	dep := find(objs, "Deployment", agentDeployment)
	if dep == nil {
		return nil, fmt.Errorf("render: the embedded manifests hold no Deployment %s", agentDeployment)
	}
	if err := configureAgent(dep, o); err != nil {
		return nil, fmt.Errorf("render: Deployment %s: %w", agentDeployment, err)
	}
	_, args := renderedAgent(objs)
	if err := grantSecrets(objs, append(agentSecrets(args, o.Namespace), o.ExtraSecretNames...)); err != nil {
		return nil, err
	}
	for _, u := range objs {
		if isCRD(u) {
			// What a later install or agent compares its version with.
			annotations := u.GetAnnotations()
			if annotations == nil {
				annotations = map[string]string{}
			}
			annotations[operator.AnnotationCRDVersion] = o.Version
			u.SetAnnotations(annotations)
		}
	}
	if o.WithoutDefaultEnvironmentBinding {
		// Left out rather than applied: an upgrade must not grant again
		// what a strict-tenancy owner removed.
		objs = slices.DeleteFunc(objs, isDefaultEnvironmentBinding)
	}
	return objs, nil
}

func isDefaultEnvironmentBinding(u *unstructured.Unstructured) bool {
	return u.GetKind() == "ClusterRoleBinding" && u.GetName() == defaultEnvironment
}

// secretsRole is the Role that lets the agent read its own Secrets by
// name (config/rbac/secrets_role.yaml).
const secretsRole = "styrmin-agent-secrets"

// agentSecrets are the Secrets of namespace ns the agent's arguments
// name: it reads each at start, so under strict tenancy (no default
// environment's ClusterRoleBinding) a Secret Role styrmin-agent-secrets
// does not grant leaves the agent crash-looping. A --repo-secret in
// another namespace (--repo-secret-namespace) is not the Role's to grant.
func agentSecrets(args []string, ns string) []string {
	var names []string
	if other := liveArg(args, "repo-secret-namespace"); other == "" || other == ns {
		names = append(names, liveArg(args, "repo-secret"))
	}
	for _, flag := range []string{"lock-secret", "status-secret", "webhook-secret-name"} {
		names = append(names, liveArg(args, flag))
	}
	return slices.DeleteFunc(names, func(n string) bool { return n == "" })
}

// grantSecrets adds names to those the shipped Role styrmin-agent-secrets
// lets the agent read: its rules are one list applied whole, so a name
// left out here is taken away from the running agent.
func grantSecrets(objs []*unstructured.Unstructured, names []string) error {
	role := find(objs, "Role", secretsRole)
	if role == nil {
		return fmt.Errorf("render: the embedded manifests hold no Role %s", secretsRole)
	}
	rules, _, err := unstructured.NestedSlice(role.Object, "rules")
	if err != nil || len(rules) == 0 {
		return fmt.Errorf("render: Role %s has no rules: %v", secretsRole, err)
	}
	rule, ok := rules[0].(map[string]any)
	if !ok {
		return fmt.Errorf("render: Role %s: its rule is not an object", secretsRole)
	}
	granted, _, _ := unstructured.NestedStringSlice(rule, "resourceNames")
	for _, name := range names {
		if !slices.Contains(granted, name) {
			granted = append(granted, name)
		}
	}
	if err := unstructured.SetNestedStringSlice(rule, granted, "resourceNames"); err != nil {
		return fmt.Errorf("render: Role %s: %w", secretsRole, err)
	}
	rules[0] = rule
	if err := unstructured.SetNestedSlice(role.Object, rules, "rules"); err != nil {
		return fmt.Errorf("render: Role %s: %w", secretsRole, err)
	}
	return nil
}

// grantedSecrets are the Secrets Role styrmin-agent-secrets of objs
// grants (nil when objs have none).
func grantedSecrets(objs []*unstructured.Unstructured) []string {
	role := find(objs, "Role", secretsRole)
	if role == nil {
		return nil
	}
	rules, _, _ := unstructured.NestedSlice(role.Object, "rules")
	var names []string
	for _, r := range rules {
		if m, ok := r.(map[string]any); ok {
			got, _, _ := unstructured.NestedStringSlice(m, "resourceNames")
			names = append(names, got...)
		}
	}
	return names
}

// manifests parses config's manifests and puts them in namespace ns.
func manifests(ns string) ([]*unstructured.Unstructured, error) {
	var docs [][]byte
	docs = append(docs, config.CRDs()...)
	docs = append(docs, config.Namespace())
	docs = append(docs, config.RBAC()...)
	docs = append(docs, config.AdmissionPolicy(), config.Service(), config.AgentDeployment())
	var objs []*unstructured.Unstructured
	for _, doc := range docs {
		got, err := parse(doc)
		if err != nil {
			return nil, fmt.Errorf("render: embedded manifest: %w", err)
		}
		objs = append(objs, got...)
	}
	for _, u := range objs {
		if err := setNamespace(u, ns); err != nil {
			return nil, fmt.Errorf("render: %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return objs, nil
}

// parse splits a multi-document YAML file into objects, skipping empty
// documents.
func parse(doc []byte) ([]*unstructured.Unstructured, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(doc)))
	var out []*unstructured.Unstructured
	for {
		b, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// setNamespace moves u to the agent's namespace ns: the Namespace itself,
// namespaced objects, the agent's service account in bindings and the
// user the admission policy lets write tasks.
func setNamespace(u *unstructured.Unstructured, ns string) error {
	if ns == config.AgentNamespace {
		return nil
	}
	switch u.GetKind() {
	case "Namespace":
		u.SetName(ns)
		return nil
	case "ClusterRoleBinding", "RoleBinding":
		subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
		for _, s := range subjects {
			m, ok := s.(map[string]any)
			if ok && m["kind"] == "ServiceAccount" && m["namespace"] == config.AgentNamespace {
				m["namespace"] = ns
			}
		}
		if err := unstructured.SetNestedSlice(u.Object, subjects, "subjects"); err != nil {
			return err
		}
	case "ValidatingAdmissionPolicy":
		vars, _, _ := unstructured.NestedSlice(u.Object, "spec", "variables")
		found := false
		for _, v := range vars {
			m, ok := v.(map[string]any)
			if ok && m["name"] == agentUserVariable {
				m["expression"] = fmt.Sprintf("request.userInfo.username == 'system:serviceaccount:%s:%s'", ns, config.AgentServiceAccount)
				found = true
			}
		}
		if !found {
			return fmt.Errorf("no variable %q naming the agent's user: cannot move it to namespace %s", agentUserVariable, ns)
		}
		if err := unstructured.SetNestedSlice(u.Object, vars, "spec", "variables"); err != nil {
			return err
		}
	}
	if u.GetNamespace() != "" {
		u.SetNamespace(ns)
	}
	return nil
}

// configureAgent sets the agent's flags, image and version label.
func configureAgent(dep *unstructured.Unstructured, o Options) error {
	scale, err := manifestScaleOf(dep)
	if err != nil {
		return err
	}
	containers, _, err := unstructured.NestedSlice(dep.Object, "spec", "template", "spec", "containers")
	if err != nil {
		return err
	}
	var agent map[string]any
	for _, c := range containers {
		if m, ok := c.(map[string]any); ok && m["name"] == agentContainer {
			agent = m
		}
	}
	if agent == nil {
		return fmt.Errorf("no container %q", agentContainer)
	}
	args, _, err := unstructured.NestedStringSlice(agent, "args")
	if err != nil {
		return err
	}
	for _, f := range []struct{ name, value string }{
		{"cluster", o.Cluster},
		{"repo", o.Repo},
		{"branch", o.Branch},
		{"path", o.Path},
		{"repo-secret", o.SecretName},
	} {
		args = setArg(args, f.name, f.value)
	}
	args = append(args, o.ExtraArgs...)
	agent["args"] = toAny(args)
	agent["image"] = o.Image
	if o.Resources != nil {
		res, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o.Resources)
		if err != nil {
			return fmt.Errorf("resources: %w", err)
		}
		agent["resources"] = res
	}
	if err := unstructured.SetNestedSlice(dep.Object, containers, "spec", "template", "spec", "containers"); err != nil {
		return err
	}
	if o.Replicas != nil {
		if err := unstructured.SetNestedField(dep.Object, int64(*o.Replicas), "spec", "replicas"); err != nil {
			return err
		}
	}
	labels := dep.GetLabels()
	if len(validation.IsValidLabelValue(o.Version)) == 0 {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[LabelVersion] = o.Version
	} else {
		delete(labels, LabelVersion)
	}
	dep.SetLabels(labels)
	annotations := dep.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[AnnotationDefaultEnvironmentClusterWide] = strconv.FormatBool(!o.WithoutDefaultEnvironmentBinding)
	annotations[AnnotationManifestScale] = scale
	dep.SetAnnotations(annotations)
	return nil
}

// manifestScaleOf is AnnotationManifestScale's value for the agent's
// Deployment as the manifest has it.
func manifestScaleOf(dep *unstructured.Unstructured) (string, error) {
	var d appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(dep.Object, &d); err != nil {
		return "", err
	}
	m := manifestScale{Replicas: replicasOf(&d)}
	if c := agentContainerOf(&d); c != nil {
		m.Resources = c.Resources
	}
	b, err := json.Marshal(m)
	return string(b), err
}

// setArg sets --name=value in args, in place of an existing --name, or
// at the end; value "" removes it.
func setArg(args []string, name, value string) []string {
	flag := "--" + name
	out := make([]string, 0, len(args)+1)
	set := false
	for _, a := range args {
		if a == flag || strings.HasPrefix(a, flag+"=") {
			if !set && value != "" {
				out = append(out, flag+"="+value)
			}
			set = true
			continue
		}
		out = append(out, a)
	}
	if !set && value != "" {
		out = append(out, flag+"="+value)
	}
	return out
}

// argValue is the value of --name=value in args ("" when absent).
func argValue(args []string, name string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// find returns the object of objs of kind and name (nil if none).
func find(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, u := range objs {
		if u.GetKind() == kind && u.GetName() == name {
			return u
		}
	}
	return nil
}

// Export writes objs as a multi-document YAML stream, fit for kubectl
// apply -f.
func Export(w io.Writer, objs []*unstructured.Unstructured) error {
	for _, u := range objs {
		b, err := yaml.Marshal(u.Object)
		if err != nil {
			return fmt.Errorf("export %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		if _, err := fmt.Fprintf(w, "---\n%s", b); err != nil {
			return fmt.Errorf("export: %w", err)
		}
	}
	return nil
}

// Describe names an object in one line: kind, namespace/name.
func Describe(u *unstructured.Unstructured) string {
	if u.GetNamespace() != "" {
		return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
	}
	return u.GetKind() + " " + u.GetName()
}
