package resolver

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
)

// An ingress controller is applied as the agent, with every namespaced
// kind and no service account: a lockfile edited by hand (its checksum is
// no signature) must not claim that for an application, nor move a
// controller into another namespace or give it another chart. DecodeLock
// refuses the claim on another deployment's name; DeclaredInstancePolicy,
// which the agent compares with the recorded policy at the lock commit,
// refuses a controller the configuration does not call for as recorded.
func TestOnlyTheIngressControllersTheConfigurationCallsForMayClaimTheirPolicy(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress("ingress: driver: \"ingress-nginx\"\ndedicatedIngress: true"))
	res, _, err := resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	var web, devIngress, shared *Instance
	for _, r := range res.Resolved {
		switch r.Instance.ID {
		case ID{Cluster: "local", Environment: "dev", Name: "web"}:
			web = r.Instance
		case EnvironmentIngressID("local", "dev"):
			devIngress = r.Instance
		case SharedIngressID("local"):
			shared = r.Instance
		}
	}
	if web == nil || devIngress == nil || shared == nil {
		t.Fatalf("resolved web %v, dev's ingress controller %v, the shared one %v", web != nil, devIngress != nil, shared != nil)
	}

	// The lockfile: only a controller's name claims internal, and a
	// controller's name always does.
	handEdited := func(in *Instance, edit func(*Instance)) error {
		t.Helper()
		c := *in
		c.Sequence = 1
		edit(&c)
		var err error
		if c.Digest, err = c.ComputeDigest(); err != nil {
			t.Fatal(err)
		}
		data, err := EncodeLock(&c)
		if err != nil {
			t.Fatal(err)
		}
		_, err = DecodeLock(c.ID.LockPath(), data)
		return err
	}
	for name, edit := range map[string]func(*Instance){
		"an application claiming internal: ingress":          func(in *Instance) { in.Internal = InternalIngress },
		"an ingress controller without internal":             func(in *Instance) { in.Internal = "" },
		"a cluster deployment that is no ingress controller": func(in *Instance) { in.ID.Name = "web"; in.Internal = "" },
	} {
		base := web
		if !strings.HasPrefix(name, "an application") {
			base = shared
		}
		if err := handEdited(base, edit); err == nil || !strings.Contains(err.Error(), "field internal:") {
			t.Errorf("%s: DecodeLock = %v, want a refusal naming field internal", name, err)
		}
	}
	if err := handEdited(devIngress, func(*Instance) {}); err != nil {
		t.Fatalf("dev's ingress controller as locked: %v", err)
	}

	// The configuration: a controller it calls for, as it calls for it.
	fsys := os.DirFS(dir)
	for _, in := range []*Instance{devIngress, shared} {
		p, err := NewLoader(0).DeclaredInstancePolicy(fsys, in)
		if err != nil || !p.Equal(ingressPolicy()) {
			t.Errorf("%s as locked: %+v, %v; want the ingress policy", in.ID, p, err)
		}
	}
	for name, c := range map[string]struct {
		edit func(*Instance)
		want string
	}{
		"moved into an application's namespace": {func(in *Instance) { in.Context.Deployment.Namespace = "dev-web" }, `in namespace "dev-web"; the configuration runs it in "dev-styrmin-ingress"`},
		"another chart":                         {func(in *Instance) { in.Driver.Name = "webapp" }, `with driver "webapp"; the configuration declares "ingress-nginx"`},
		"an environment that does not exist":    {func(in *Instance) { in.ID.Environment = "gone" }, "gone"},
	} {
		in := *devIngress
		ctx := *devIngress.Context
		in.Context = &ctx
		c.edit(&in)
		if _, err := NewLoader(0).DeclaredInstancePolicy(fsys, &in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error saying %q", name, err, c.want)
		}
	}

	// Without dedicatedIngress, dev has no controller of its own.
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress("ingress: driver: \"ingress-nginx\""))
	if _, err := NewLoader(0).DeclaredInstancePolicy(fsys, devIngress); err == nil || !strings.Contains(err.Error(), "does not call for") {
		t.Errorf("dev's controller without dedicatedIngress: %v, want a refusal", err)
	}
	if _, err := NewLoader(0).DeclaredPolicy(fsys, ID{Cluster: "local", Environment: "dev", Name: "web"}, InternalIngress); err == nil || !strings.Contains(err.Error(), "does not call for") {
		t.Errorf("web claiming the ingress policy: %v, want a refusal", err)
	}
}

// TestALockfileWhosePolicyReachesAReservedNamespaceIsReadButNamed: the
// agent applies what a lockfile's recorded policy allows, so a lockfile
// whose policy lists kube-system or the agent's default namespace (written
// by hand with a matching checksum, or by a resolver before it refused
// such a policy) is refused where the agent makes tasks, naming the field
// (ReservedPolicyNamespace); reading it is no error, so the lock that
// replaces it still runs.
func TestALockfileWhosePolicyReachesAReservedNamespaceIsReadButNamed(t *testing.T) {
	res, _, err := resolveDir(t, exampleCopy(t))
	if err != nil {
		t.Fatal(err)
	}
	web := res.Resolved[0].Instance
	for _, ns := range []string{"kube-system", "styrmin-system", "default"} {
		in := *web
		ctx := *web.Context
		ctx.Environment.Policy = &drivers.Policy{Namespaces: []string{"shared", ns}}
		in.Context, in.Sequence = &ctx, 1
		if in.Digest, err = in.ComputeDigest(); err != nil {
			t.Fatal(err)
		}
		data, err := EncodeLock(&in)
		if err != nil {
			t.Fatal(err)
		}
		read, err := DecodeLock(in.ID.LockPath(), data)
		if err != nil {
			t.Fatalf("a policy listing %s: %v, want the lockfile read", ns, err)
		}
		want := fmt.Sprintf("field context.environment.policy.namespaces[1]: %q is reserved", ns)
		if err := ReservedPolicyNamespace(in.ID.LockPath(), read); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("a policy listing %s: %v, want %q", ns, err, want)
		}
	}
	if err := ReservedPolicyNamespace(web.ID.LockPath(), web); err != nil {
		t.Errorf("the example's policy: %v", err)
	}
}

// TestADeploymentsFolderMayHoldNotesAndHiddenEntries: what is plainly not
// a deployment (a README, .gitkeep, a backup copy, a folder named with a
// leading _) is left unread without an error, and the deployments beside
// it resolve as before.
func TestADeploymentsFolderMayHoldNotesAndHiddenEntries(t *testing.T) {
	dir := exampleCopy(t)
	before, _, err := resolveDir(t, dir)
	if err != nil {
		t.Fatal(err)
	}
	ddir := "clusters/local/environments/dev/deployments/"
	writeFile(t, dir, ddir+"README.md", "# dev's deployments\n")
	writeFile(t, dir, ddir+".gitkeep", "")
	writeFile(t, dir, ddir+"web.cue.bak", "driver: \"webapp\"\n")
	writeFile(t, dir, ddir+"_templates/base.cue", "appVersion: \"1.0.0\"\n")
	after, _, err := resolveDir(t, dir)
	if err != nil {
		t.Fatalf("a deployments folder with notes and hidden entries: %v", err)
	}
	if len(after.Resolved) != len(before.Resolved) {
		t.Errorf("%d deployments resolved, %d before", len(after.Resolved), len(before.Resolved))
	}
}
