package resolver

import (
	"fmt"
	"strings"
)

// reservedNamespaces are namespaces no deployment may use: the
// cluster's own (kube-*, default) and the agent's.
var reservedNamespaces = []string{"default", "kube-public", "kube-system", "kube-node-lease", "styrmin-system"}

// NamespaceOf is a deployment's namespace: its environment's namespace
// prefix and its name.
func NamespaceOf(e *Environment, d *Deployment) string {
	return e.NamespacePrefix + "-" + d.ID.Name
}

// namespaceErrors checks the namespaces of every deployment of repo
// before anything resolves: two deployments of one cluster, internal ones
// included, never share a namespace (each gets an error naming the
// other's file), none uses a reserved one (kube-*, default, the agent's),
// and no environment's policy lets its deployments into one. It is one
// rule for every path that resolves: plan, lock, lock mode.
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
				owners[ns] = append(owners[ns], nsOwner{d.ID, d.File, ""})
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
			owners[ic.namespace] = append(owners[ic.namespace], nsOwner{ic.id, c.File, "the ingress controller "})
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
				var others []string
				for _, o := range ds {
					if o != d {
						others = append(others, fmt.Sprintf("%s%s (%s)", o.what, o.id, o.file))
					}
				}
				out[d.id] = &ConfigError{File: d.file, Msg: fmt.Sprintf(
					"namespace %q is also the namespace of %s: two deployments never share a namespace; change an environment's namespacePrefix or rename a deployment",
					ns, strings.Join(others, ", "))}
			}
		}
		for _, e := range c.Environments {
			err := policyNamespaceError(c, e)
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

// policyNamespaceError refuses a reserved namespace in the policy of e's
// deployments, in the file that lists it (the environment's, else the
// cluster's default): policy.namespaces would let every chart of the
// environment into the cluster's own namespaces or the agent's.
func policyNamespaceError(c *Cluster, e *Environment) *ConfigError {
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
	}
	return nil
}

// nsOwner is a deployment that has a namespace: what names it in an
// error ("" for an application) and the file that defines it.
type nsOwner struct {
	id   ID
	file string
	what string
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
// deployment.
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
		kept[c.Name] = append(kept[c.Name], keptNamespace{namespace: was, owner: nsOwner{id, file, what}})
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
	return errs, kept
}

// keptNamespace is a namespace a deployment refused a move keeps.
type keptNamespace struct {
	namespace string
	owner     nsOwner
}
