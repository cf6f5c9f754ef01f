package resolver

import (
	"fmt"
	"sort"
	"strings"
)

// reservedNamespaces are namespaces no deployment may use: the
// cluster's own (kube-*, default) and the agent's.
var reservedNamespaces = []string{"default", "kube-public", "kube-system", "kube-node-lease", "styrmin-system"}

// NamespaceOf is a deployment's namespace: its environment's namespace
// prefix and its name.
func NamespaceOf(e *Environment, d *Deployment) string {
	return deploymentNamespace(e.NamespacePrefix, d.ID)
}

func deploymentNamespace(prefix string, id ID) string { return prefix + "-" + id.Name }

// namespaceErrors checks the namespaces of every deployment of repo
// before anything resolves: two deployments of one cluster, internal ones
// included, never share a namespace (each gets an error naming the
// other's file), none uses a reserved one (kube-*, default, the agent's),
// and no environment's policy lets its deployments into one, nor into a
// deployment's own namespace. kept are, by cluster, the namespaces locked
// deployments keep (namespaceMoveErrors): a deployment being deleted
// among them gets no error, only the one that would share its namespace.
// It is one rule for every path that resolves: plan, lock, lock mode.
func namespaceErrors(repo *Repository, kept map[string][]keptNamespace) map[ID]error {
	out := map[ID]error{}
	for _, c := range repo.Clusters {
		owners := map[string][]nsOwner{}
		for _, k := range kept[c.Name] {
			owners[k.namespace] = append(owners[k.namespace], k.owner)
		}
		for _, e := range c.Environments {
			for _, d := range e.Deployments {
				ns := NamespaceOf(e, d)
				owners[ns] = append(owners[ns], nsOwner{id: d.ID, file: d.File})
				if reserved(ns) {
					out[d.ID] = &ConfigError{File: d.File, Msg: fmt.Sprintf(
						"namespace %q (namespacePrefix %q + deployment %q) is reserved for the cluster or the agent (kube-*, default, styrmin-system): change the environment's namespacePrefix or rename the deployment",
						ns, e.NamespacePrefix, d.ID.Name)}
				}
			}
		}
		// The internal deployments' namespaces are theirs alone too, and
		// an environment's controller is no more allowed in a reserved
		// one than an application: DecodeLock refuses such a lockfile,
		// and with it every later lock and plan of the repository.
		for _, ic := range ingressControllers(c) {
			owners[ic.namespace] = append(owners[ic.namespace], nsOwner{id: ic.id, file: c.File, what: "the ingress controller "})
			if ic.env != nil && reserved(ic.namespace) {
				out[ic.id] = placed(&ConfigError{File: ic.env.File, Field: "namespacePrefix", Msg: fmt.Sprintf(
					"the environment's ingress controller %s would run in namespace %q (namespacePrefix %q, the folder's name unless set, + %q), which is reserved for the cluster or the agent (kube-*, default, styrmin-system): set another namespacePrefix or dedicatedIngress: false",
					ic.id, ic.namespace, ic.env.NamespacePrefix, envIngressSuffix)}, ic.env.pos)
			}
		}
		for ns, ds := range owners {
			if len(ds) < 2 {
				continue
			}
			for _, d := range ds {
				if d.leaving > 0 {
					continue // nothing of it resolves: its tombstone is written anyway
				}
				var others []string
				var leaving *nsOwner
				for _, o := range ds {
					if o != d {
						others = append(others, o.String())
						if o.leaving > 0 {
							leaving = &o
						}
					}
				}
				msg := fmt.Sprintf(
					"namespace %q is also the namespace of %s: two deployments never share a namespace; change an environment's namespacePrefix or rename a deployment",
					ns, strings.Join(others, ", "))
				if leaving != nil {
					// Locked together, its tombstone's task and this
					// deployment's first would run in the one namespace,
					// unordered; and the agent names a task after the
					// deployment's name and sequence only, so this one's
					// first may bear the name of a task the other left.
					msg += fmt.Sprintf(", or delete first: lock %s's deletion alone and add %s in a later commit, once the agent has uninstalled it",
						leaving.id, d.id)
				}
				out[d.id] = &ConfigError{File: d.file, Msg: msg}
			}
		}
		for _, e := range c.Environments {
			err := policyNamespaceError(c, e, owners)
			if err == nil {
				continue
			}
			for _, d := range e.Deployments {
				if out[d.ID] == nil {
					out[d.ID] = err
				}
			}
		}
	}
	return out
}

// policyNamespaceError refuses a reserved namespace, or one of owners (a
// deployment's own namespace), in the policy of e's deployments, in the
// file that lists it (the environment's, else the cluster's default):
// policy.namespaces would let every chart of the environment into the
// cluster's own namespaces or the agent's, or into another deployment's,
// where a release takes what it renders without asking whose it is (and
// every release applies as the same field manager), and its uninstall
// deletes it.
func policyNamespaceError(c *Cluster, e *Environment, owners map[string][]nsOwner) *ConfigError {
	l, p := e.layer(), e.Policy
	if p == nil || p.Namespaces == nil {
		l, p = c.layer(), c.Policy
	}
	if p == nil {
		return nil
	}
	for i, ns := range p.Namespaces {
		if reserved(ns) {
			return placed(&ConfigError{File: l.file, Field: fmt.Sprintf("policy.namespaces[%d]", i), Msg: fmt.Sprintf(
				"namespace %q is reserved for the cluster or the agent (kube-*, default, styrmin-system): no deployment may put objects there; remove it from policy.namespaces", ns)}, l.pos)
		}
		if ds := owners[ns]; len(ds) > 0 {
			names := make([]string, len(ds))
			for j, d := range ds {
				names[j] = d.String()
			}
			return placed(&ConfigError{File: l.file, Field: fmt.Sprintf("policy.namespaces[%d]", i), Msg: fmt.Sprintf(
				"namespace %q belongs to %s: a deployment's namespace is its own, and another allowed there would take over its objects and delete them when it is uninstalled; remove it from policy.namespaces (list a shared namespace, one no deployment has)",
				ns, strings.Join(names, ", "))}, l.pos)
		}
	}
	return nil
}

// nsOwner is a deployment that has a namespace: what names it in an
// error ("" for an application), the file that defines it (its lockfile
// when it is being deleted) and, when it is being deleted (its
// configuration is gone, its lock is no tombstone yet), its lock's
// sequence (0: it is not).
type nsOwner struct {
	id      ID
	file    string
	what    string
	leaving int64
}

// String names the owner in an error.
func (o nsOwner) String() string {
	if o.leaving > 0 {
		return fmt.Sprintf("%s%s (%s, sequence %d), which is being deleted (its configuration is gone)", o.what, o.id, o.file, o.leaving)
	}
	return fmt.Sprintf("%s%s (%s)", o.what, o.id, o.file)
}

func reserved(ns string) bool {
	for _, r := range reservedNamespaces {
		if ns == r {
			return true
		}
	}
	return strings.HasPrefix(ns, "kube-")
}

// namespaceMoveErrors refuses to move a deployment to another namespace:
// one whose current lock (not a tombstone) places it in a namespace other
// than the one its configuration gives now (the environment's
// namespacePrefix changed). The agent would install it afresh in the new
// namespace and leave the old one's release, volumes and
// StyrminDeployment running, unowned by any lock; so the deployment keeps
// its lock until it is deleted (a tombstone) and added back, or the
// namespacePrefix is set back. The error is the environment's, at
// namespacePrefix. kept gives, by cluster, the namespaces the refused
// deployments keep: still theirs, which namespaceErrors gives no other
// deployment; and the namespaces of the deployments being deleted (locked,
// not as a tombstone, but gone from the configuration): a lock writes
// their tombstones, but the agent uninstalls them later, in their
// namespace, and a new deployment there would share it with them.
func namespaceMoveErrors(repo *Repository, locks map[ID]*Instance) (errs map[ID]error, kept map[string][]keptNamespace) {
	if len(locks) == 0 {
		return nil, nil
	}
	errs, kept = map[ID]error{}, map[string][]keptNamespace{}
	moved := func(c *Cluster, id ID, ns string, e *Environment, file, what string) {
		cur := locks[id]
		if cur == nil || cur.Tombstone() || cur.Context == nil {
			return
		}
		was := cur.Context.Deployment.Namespace
		if was == "" || was == ns {
			return
		}
		todo := fmt.Sprintf("set namespacePrefix back, or delete the deployment (remove it and lock: a tombstone uninstalls it from %q) and add it again", was)
		if what != "" {
			todo = fmt.Sprintf("set namespacePrefix back, or set dedicatedIngress: false and lock (the controller's tombstone uninstalls it from %q, once no deployment of the environment uses its class), then set the new namespacePrefix and dedicatedIngress: true", was)
		}
		errs[id] = placed(&ConfigError{File: e.File, Field: "namespacePrefix", Msg: fmt.Sprintf(
			"%sdeployment %s would move from namespace %q (its lock, sequence %d) to %q (namespacePrefix %q, the folder's name unless set): a deployment does not move between namespaces, its release, volumes and StyrminDeployment would stay behind in %q; %s",
			what, id, was, cur.Sequence, ns, e.NamespacePrefix, was, todo)}, e.pos)
		kept[c.Name] = append(kept[c.Name], keptNamespace{namespace: was, owner: nsOwner{id: id, file: file, what: what}})
	}
	for _, c := range repo.Clusters {
		for _, e := range c.Environments {
			for _, d := range e.Deployments {
				moved(c, d.ID, NamespaceOf(e, d), e, d.File, "")
			}
		}
		for _, ic := range ingressControllers(c) {
			if ic.env != nil {
				moved(c, ic.id, ic.namespace, ic.env, ic.env.File, "the ingress controller ")
			}
		}
	}
	for _, l := range leavingNamespaces(repo, locks) {
		kept[l.owner.id.Cluster] = append(kept[l.owner.id.Cluster], l)
	}
	return errs, kept
}

// leavingNamespaces are the namespaces of the deployments locks hold that
// the configuration no longer has (a lock deletes them, or keeps an
// ingress controller while deployments use its class), sorted by
// deployment.
func leavingNamespaces(repo *Repository, locks map[ID]*Instance) []keptNamespace {
	present := map[ID]bool{}
	for _, c := range repo.Clusters {
		for _, e := range c.Environments {
			for _, d := range e.Deployments {
				present[d.ID] = true
			}
		}
		for _, ic := range ingressControllers(c) {
			present[ic.id] = true
		}
	}
	var out []keptNamespace
	for id, in := range locks {
		if present[id] || in.Tombstone() || in.Context == nil || in.Context.Deployment.Namespace == "" {
			continue
		}
		what := ""
		if in.Internal != "" {
			what = "the ingress controller "
		}
		out = append(out, keptNamespace{namespace: in.Context.Deployment.Namespace,
			owner: nsOwner{id: id, file: id.LockPath(), what: what, leaving: in.Sequence}})
	}
	sort.Slice(out, func(i, j int) bool { return lessID(out[i].owner.id, out[j].owner.id) })
	return out
}

// keptNamespace is a namespace a deployment refused a move keeps, or one
// a deployment being deleted still has.
type keptNamespace struct {
	namespace string
	owner     nsOwner
}
