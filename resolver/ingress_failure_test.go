package resolver

import (
	"os"
	"slices"
	"strings"
	"testing"
)

// TestApplicationsKeepTheirClassWhileTheirNewControllerFailsToResolve:
// one commit turns dedicatedIngress on and breaks ingress: (a parameter
// the driver does not have). The environments' controllers fail to
// resolve, so nothing would serve "<env>-nginx": under LockKeepGoing (the
// CLI's and the agent's lock mode) the applications must not move there.
// They fail too, each naming its controller's failure, and keep their
// locks on the shared class; the lock after the fix moves them, after
// their new controller.
func TestApplicationsKeepTheirClassWhileTheirNewControllerFailsToResolve(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: driver: "ingress-nginx"`))
	lockDirInto(t, dir)
	before := map[ID]string{}
	for _, id := range exampleApps {
		before[id] = lockOf(t, dir, id)
	}

	writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: {driver: "ingress-nginx", parameters: bogus: 1}`+"\ndedicatedIngress: true"))
	ws, err := LoadWorkspace(os.DirFS(dir), WorkspaceOptions{SourceCommit: strings.Repeat("0", 40)})
	must(t, err)
	changes, res, err := ws.Lock(LockKeepGoing)
	if err == nil {
		t.Fatal("lock with broken controllers reports no error")
	}
	for _, c := range changes {
		if c.Next.Internal == "" {
			t.Errorf("%s is locked (after %v) while its environment's controller fails to resolve", c.ID, c.Next.After)
		}
	}
	failed := map[ID]string{}
	for _, e := range res.Errors {
		failed[e.ID] = e.Error()
	}
	for _, id := range exampleApps {
		ctl := EnvironmentIngressID(id.Cluster, id.Environment)
		msg := failed[id]
		if !strings.Contains(msg, ctl.String()) || !strings.Contains(msg, "ingress.parameters.bogus") || !strings.Contains(msg, id.Environment+"-nginx") {
			t.Errorf("%s: error %q, want one naming class %s-nginx and the failure of %s (ingress.parameters.bogus)", id, msg, id.Environment, ctl)
		}
	}

	// The fix: the controllers resolve, the applications move after them.
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: driver: "ingress-nginx"`+"\ndedicatedIngress: true"))
	for _, id := range exampleApps {
		if got := lockOf(t, dir, id); got != before[id] {
			t.Fatalf("%s's lockfile changed before the fix", id)
		}
	}
	fixed := lockDirInto(t, dir)
	for _, id := range exampleApps {
		c, ok := changeFor(fixed, id)
		want := []string{AfterRef(EnvironmentIngressID(id.Cluster, id.Environment), 1)}
		if !ok || !slices.Equal(c.Next.After, want) {
			t.Errorf("after the fix %s runs after %v, want %v", id, c.Next.After, want)
		}
	}
}

// TestRemovingIngressKeepsEnvironmentControllersWhoseClassIsStillUsed:
// removing ingress: while dedicatedIngress stays true leaves every
// application on "<env>-nginx" (their context does not read ingress:).
// The environments' controllers stay locked, so no Ingress loses its
// controller without the deletion rule counting it; only the shared
// controller goes, counted. Turning dedicatedIngress off later moves the
// applications and then removes the controllers, uncounted as before.
func TestRemovingIngressKeepsEnvironmentControllersWhoseClassIsStillUsed(t *testing.T) {
	dir := exampleCopy(t)
	writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: driver: "ingress-nginx"`+"\ndedicatedIngress: true"))
	lockDirInto(t, dir)

	writeFile(t, dir, "clusters/local/cluster.cue", withIngress("dedicatedIngress: true"))
	gone := lockDirInto(t, dir)
	for _, ctl := range []ID{devIngress, stagingIngress} {
		if c, ok := changeFor(gone, ctl); ok {
			t.Errorf("%s is relocked (tombstone %t) while its environment's applications still use its class", ctl, c.Next.Tombstone())
		}
	}
	if got := Deleted(gone); !slices.Equal(got, []ID{sharedIngress}) {
		t.Errorf("removing ingress: deletes %v, want %s alone", got, sharedIngress)
	}

	writeFile(t, dir, "clusters/local/cluster.cue", exampleCluster)
	off := lockDirInto(t, dir)
	if d, err := checkDeletions(RepoSettings{}, off, 0); err != nil || d.Count != 0 {
		t.Errorf("off: the deletion rule counts %d deletions (%v), want none", d.Count, err)
	}
	for _, ctl := range []ID{devIngress, stagingIngress} {
		c, ok := changeFor(off, ctl)
		var want []string
		for _, id := range exampleApps {
			if id.Environment == ctl.Environment {
				app, _ := changeFor(off, id)
				want = append(want, AfterRef(id, app.Next.Sequence))
			}
		}
		if !ok || !c.Next.Tombstone() || !slices.Equal(c.Next.After, want) {
			t.Errorf("off: %s: %+v, want a tombstone after %v", ctl, c.Next, want)
		}
	}
}

// TestADeploymentConnectedToOneFailedForItsIngressFailsToo: an app failed
// after the second pass (its class's controller does not resolve) is no
// endpoint a peer may be locked against: the peer that connects to it,
// and the one connecting to that peer, fail as when a deployment they
// connect to does not resolve; the others are kept.
func TestADeploymentConnectedToOneFailedForItsIngressFailsToo(t *testing.T) {
	id := func(name string) ID { return ID{Cluster: "local", Environment: "dev", Name: name} }
	resolved := func(name string, connects ...string) *Resolved {
		return &Resolved{Instance: &Instance{ID: id(name)}, Deployment: &Deployment{ID: id(name), File: "clusters/local/environments/dev/deployments/" + name + ".cue", Connects: connects}}
	}
	// db failed in the second pass: other, which connects to it, was
	// resolved and locked so (the second pass's own rule), and stays.
	res := &Result{Errors: []*DeploymentError{{ID: id("web"), Err: errForTest("its ingress class's controller fails")}, {ID: id("db"), Err: errForTest("a policy error")}}}
	kept := failConnectedTo([]*Resolved{resolved("hub", "web.http"), resolved("ui", "hub"), resolved("cache"), resolved("other", "db")}, map[ID]bool{id("web"): true}, res)
	var names []string
	for _, r := range kept {
		names = append(names, r.Instance.ID.Name)
	}
	if !slices.Equal(names, []string{"cache", "other"}) {
		t.Fatalf("kept %v, want cache and other", names)
	}
	failed := map[string]string{}
	for _, e := range res.Errors {
		failed[e.ID.Name] = e.Error()
	}
	if !strings.Contains(failed["hub"], `connects: deployment "web" failed to resolve`) || !strings.Contains(failed["ui"], `deployment "hub" failed to resolve`) {
		t.Fatalf("errors %v, want hub failing for web and ui for hub", failed)
	}
}

type errForTest string

func (e errForTest) Error() string { return string(e) }
