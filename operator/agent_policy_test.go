package operator_test

import (
	"context"
	"io/fs"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/examples"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// TestALockfileThatLoosensItsEnvironmentsPolicyIsRefused: the agent
// enforces the policy a lockfile records, so whoever can commit a
// lockfile (its checksum recomputed) could loosen the policy its
// environment's files declare, past whoever reviews those files. The
// agent compares the recorded policy with what the cluster and
// environment files declare at the lock commit: web's next instance,
// committed by hand with cluster-scoped ClusterRoles allowed, fails its
// task with PolicyViolation saying both policies, before any step runs,
// and web stays at the instance before.
func TestALockfileThatLoosensItsEnvironmentsPolicyIsRefused(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	first := e.lock(t)["web"]
	e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", first))

	e.lockByHand(t, resolver.ID{Cluster: agentCluster, Environment: "dev", Name: "web"}, first+1, func(in *resolver.Instance) {
		in.Context.Parameters["replicas"] = 3
		in.Context.Environment.Policy = &drivers.Policy{Kinds: []string{"*", "ClusterRole", "ClusterRoleBinding"}}
	})
	task := e.waitTask(t, webNamespace, "web", first+1)
	if task.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(task.Status.Message, v1alpha1.ReasonPolicyViolation) ||
		!strings.Contains(task.Status.Message, `records the policy {"kinds":["*","ClusterRole","ClusterRoleBinding"]}`) ||
		!strings.Contains(task.Status.Message, "declare {} (the default)") {
		t.Fatalf("the hand-made lock's task: %s %q; want Failed, PolicyViolation saying both policies", task.Status.Phase, task.Status.Message)
	}
	for _, st := range task.Status.Steps {
		if st.State != v1alpha1.StepPending && st.State != "" {
			t.Errorf("step %s ran (%s)", st.Name, st.State)
		}
	}
	if sd := e.deployment(t, webNamespace); sd == nil || sd.Status.ActiveSequence != first || sd.Status.AppliedSequence != first {
		t.Errorf("web's StyrminDeployment after the refused lock: %+v", sd.Status)
	}
}

// TestAnIngressLockWrittenByHandWithItsOwnValuesIsRefused pins that an
// ingress controller's lockfile committed by hand with values of its own
// (an image a lock of the configuration never writes), its checksum
// recomputed, fails its task with PolicyViolation before any step runs:
// the controller applies as the agent, with every namespaced kind, so the
// agent checks the instance against what the configuration at the lock
// commit resolves with the driver version it records. The controller
// keeps its image.
func TestAnIngressLockWrittenByHandWithItsOwnValuesIsRefused(t *testing.T) {
	t.Parallel()
	e, first := startIngressAgent(t)

	e.lockByHand(t, resolver.SharedIngressID(agentCluster), first+1, func(in *resolver.Instance) {
		in.Values["image"] = map[string]any{"repository": "evil.example/controller", "tag": "v1"}
	})
	task := e.waitTask(t, "styrmin-ingress", "styrmin.ingress", first+1)
	if task.Status.Phase != v1alpha1.TaskFailed || !strings.Contains(task.Status.Message, v1alpha1.ReasonPolicyViolation) ||
		!strings.Contains(task.Status.Message, "with its values other than the configuration and driver") {
		t.Fatalf("the hand-made ingress lock's task: %s %q; want Failed, PolicyViolation naming its values", task.Status.Phase, task.Status.Message)
	}
	for _, st := range task.Status.Steps {
		if st.State != v1alpha1.StepPending && st.State != "" {
			t.Errorf("step %s ran (%s)", st.Name, st.State)
		}
	}
	var d appsv1.Deployment
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "styrmin-ingress", Name: ingressController}, &d); err != nil {
		t.Fatal(err)
	}
	if img := d.Spec.Template.Spec.Containers[0].Image; strings.Contains(img, "evil.example") {
		t.Errorf("the controller runs %s", img)
	}
}

// lockByHand commits, as someone with write access could, id's lockfile
// at the head changed by edit at sequence seq, its digest and checksum
// recomputed: not written by a lock.
func (e *agentEnv) lockByHand(t *testing.T, id resolver.ID, seq int64, edit func(in *resolver.Instance)) {
	t.Helper()
	_, err := e.clone.CommitLocks(context.Background(), gitsource.CommitRequest{Build: func(_ context.Context, head gitsource.Hash, headFS fs.FS) (gitsource.Change, error) {
		in, err := resolver.ReadLock(headFS, id.LockPath())
		if err != nil {
			return gitsource.Change{}, err
		}
		in.Sequence = seq
		edit(in)
		if in.Digest, err = in.ComputeDigest(); err != nil {
			return gitsource.Change{}, err
		}
		data, err := resolver.EncodeLock(in)
		if err != nil {
			return gitsource.Change{}, err
		}
		return gitsource.Change{Summary: id.Name + " by hand", Files: map[string][]byte{id.LockPath(): data}, Locks: map[string]int{id.String(): int(seq)}}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
}

// TestAnIngressLockChainEndsAtItsLastStep: two configuration commits
// changing the ingress controller, locked at once (`styrminctl lock
// --push`: one lock commit each, both on top of the second), give the
// first step's lock commit the second's configuration, which its lockfile
// does not match: the agent checks a lockfile against its lock commit's
// configuration only (a lockfile's sourceCommit is its own word), so
// that step may fail as not written by a lock of it. The chain's last
// step, whose lock commit holds its own configuration, applies, and the
// controller ends at it.
func TestAnIngressLockChainEndsAtItsLastStep(t *testing.T) {
	t.Parallel()
	e, first := startIngressAgent(t)
	for _, n := range []string{"2", "3"} {
		e.commitConfig(t, "the ingress controller runs "+n, map[string][]byte{"clusters/local/cluster.cue": []byte(ingressCluster + "ingress: parameters: replicas: " + n + "\n")})
	}
	e.ctl(t, "lock", "--push")
	requireSucceeded(t, e.waitTask(t, "styrmin-ingress", "styrmin.ingress", first+2))
	var d appsv1.Deployment
	if err := e.c.Get(context.Background(), client.ObjectKey{Namespace: "styrmin-ingress", Name: ingressController}, &d); err != nil {
		t.Fatal(err)
	}
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("the controller runs %v replicas, want the chain's last step's 3", d.Spec.Replicas)
	}
}

// TestAPolicyChangeLockedInAChainEndsAtItsLastStep: two commits each
// changing dev's policy, locked at once, give the first step's lock
// commit the second's policy; the chain's last step applies (see
// TestAnIngressLockChainEndsAtItsLastStep for why an earlier one may
// not).
func TestAPolicyChangeLockedInAChainEndsAtItsLastStep(t *testing.T) {
	t.Parallel()
	e := startAgentEnv(t)
	first := e.lock(t)["web"]
	e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", first))
	env, err := fs.ReadFile(examples.Repo(), "clusters/local/environments/dev/environment.cue")
	if err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{`["dev-shared"]`, `["dev-shared", "dev-extra"]`} {
		e.commitConfig(t, "dev's policy: "+ns, map[string][]byte{"clusters/local/environments/dev/environment.cue": append(slices.Clone(env), []byte("policy: namespaces: "+ns+"\n")...)})
	}
	e.ctl(t, "lock", "--push")
	requireSucceeded(t, e.waitTask(t, webNamespace, "web", first+2))
	if sd := e.deployment(t, webNamespace); sd == nil || sd.Status.ActiveSequence != first+2 {
		t.Errorf("web's StyrminDeployment after the chain: %+v; want the last step active", sd)
	}
}

// startIngressAgent starts an agent on ingressRepo and returns it once the
// shared ingress controller's first task succeeded, with its sequence.
func startIngressAgent(t *testing.T) (*agentEnv, int64) {
	t.Helper()
	e := startAgentEnvWith(t, ingressRepo())
	first := e.lock(t)["styrmin.ingress"]
	e.startAgent(t)
	requireSucceeded(t, e.waitTask(t, "styrmin-ingress", "styrmin.ingress", first))
	return e, first
}
