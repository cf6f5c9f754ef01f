package ui

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// row is one deployment of the overview.
type row struct {
	ID        resolver.ID
	Namespace string
	// Locked is the sequence git's lockfile holds at the head (0: no
	// repository, or not locked); Applied and Active the cluster's.
	Locked, Applied, Active int64
	Driver, App             string
	// Ready is True, False or Unknown, with the Ready condition's reason
	// and message.
	Ready, Reason, Message string
	// Behind: the newest instance (in git, or the newest task) is not
	// active. Failed: the newest task failed. Stalled: the deployment
	// needs a change in git (a hand-set sequence, an invalid spec).
	Behind, Failed, Stalled bool
	// Held is the hold's reason when git holds the deployment.
	Held string
	// Tombstone marks a deleted deployment.
	Tombstone bool
	// Newest is the newest task's name and phase; Why says what it waits
	// for or why it failed.
	Newest, NewestPhase, Why string
	// InCluster is false for a deployment git locks that the cluster
	// does not have yet.
	InCluster bool
}

// State is the one word the overview's state column shows.
func (r row) State() string {
	switch {
	case r.Failed:
		return "failed"
	case r.Stalled:
		return "stalled"
	case r.Held != "":
		return "held"
	case !r.InCluster:
		return "not applied"
	case r.Behind:
		return "behind"
	case r.Tombstone:
		return "deleted"
	case r.Ready == "True":
		return "ready"
	}
	return "not ready"
}

type environmentView struct {
	Name string
	Rows []row
}

type clusterView struct {
	Name string
	// Error is why the cluster could not be read.
	Error        string
	Sources      []sourceView
	Environments []environmentView
	Count        int
}

type sourceView struct {
	Name, URL, Branch, Synced, SyncTime, Ready, Message string
	// NotLocked is the lock mode's Locked condition when False, reason
	// and message: deployments it held back keep what they run.
	NotLocked string
}

// filter is the overview's query.
type filter struct {
	Cluster, Environment, Query, State string
}

func (f filter) keeps(r row) bool {
	if f.Cluster != "" && r.ID.Cluster != f.Cluster {
		return false
	}
	if f.Environment != "" && r.ID.Environment != f.Environment {
		return false
	}
	if f.Query != "" && !strings.Contains(r.ID.String(), f.Query) && !strings.Contains(r.Namespace, f.Query) {
		return false
	}
	switch f.State {
	case "", "all":
		return true
	case "behind":
		return r.Behind || !r.InCluster
	case "failed":
		return r.Failed
	case "held":
		return r.Held != ""
	case "stalled":
		return r.Stalled
	case "notready":
		return r.Ready != "True" && r.State() != "deleted"
	}
	return r.State() == f.State
}

type overviewData struct {
	Clusters []clusterView
	Filter   filter
	// States are the filter's choices.
	States []string
	// Head is the git head the locked sequences are read at.
	Head string
	// Totals count the shown deployments by state.
	Total, Failed, Behind, Held, NotReady int
	GitError                              string
	// InvalidLocks are the lockfiles at Head skipped as invalid, each
	// with why.
	InvalidLocks []string
}

var filterStates = []string{"all", "failed", "behind", "held", "stalled", "notready"}

func (h *Handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	f := filter{Cluster: q.Get("cluster"), Environment: q.Get("env"), Query: q.Get("q"), State: q.Get("state")}
	if f.State != "" && !slices.Contains(filterStates, f.State) {
		h.fail(w, http.StatusBadRequest, fmt.Errorf("state %q: expected one of %s", f.State, strings.Join(filterStates, ", ")))
		return
	}
	d := h.overviewData(ctx, f)
	h.render(w, "overview", page{Title: "Overview", Live: true, Data: d})
}

// overviewData reads every cluster (and git's head) into the overview.
func (h *Handler) overviewData(ctx context.Context, f filter) overviewData {
	d := overviewData{Filter: f, States: filterStates}
	gs := h.headState()
	if gs != nil {
		d.Head = gs.head.Short()
		if gs.err != nil {
			d.GitError = mask(gs.err.Error())
		}
		for _, why := range gs.invalid {
			d.InvalidLocks = append(d.InvalidLocks, mask(why))
		}
	}
	for _, c := range h.o.Clusters {
		if f.Cluster != "" && c.Name != f.Cluster {
			continue
		}
		cv := h.clusterView(ctx, &c, gs, f)
		for _, e := range cv.Environments {
			for _, r := range e.Rows {
				d.Total++
				switch {
				case r.Failed:
					d.Failed++
				case r.Held != "":
					d.Held++
				case r.Behind || !r.InCluster:
					d.Behind++
				case r.State() == "deleted":
					// Gone as git says: nothing to be ready.
				case r.Ready != "True":
					d.NotReady++
				}
			}
		}
		d.Clusters = append(d.Clusters, cv)
	}
	return d
}

func (h *Handler) clusterView(ctx context.Context, c *Cluster, gs *headState, f filter) clusterView {
	cv := clusterView{Name: c.Name}
	var sds v1alpha1.StyrminDeploymentList
	var tasks v1alpha1.StyrminTaskList
	var srcs v1alpha1.StyrminSourceList
	for _, l := range []struct {
		what string
		list client.ObjectList
	}{{"StyrminDeployments", &sds}, {"StyrminTasks", &tasks}, {"StyrminSources", &srcs}} {
		if err := c.Reader.List(ctx, l.list); err != nil {
			cv.Error = fmt.Sprintf("listing %s: %s", l.what, mask(err.Error()))
			return cv
		}
	}
	for i := range srcs.Items {
		s := &srcs.Items[i]
		sv := sourceView{Name: s.Namespace + "/" + s.Name, URL: s.Spec.URL, Branch: s.Spec.Branch, Synced: short(s.Status.LastSyncedCommit), Ready: "Unknown"}
		if s.Status.LastSyncTime != nil {
			sv.SyncTime = s.Status.LastSyncTime.UTC().Format("2006-01-02 15:04:05Z")
		}
		if cond := apimeta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); cond != nil {
			sv.Ready, sv.Message = string(cond.Status), mask(cond.Message)
		}
		if cond := apimeta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionLocked); cond != nil && cond.Status == "False" {
			sv.NotLocked = cond.Reason + ": " + mask(cond.Message)
		}
		cv.Sources = append(cv.Sources, sv)
	}
	standing := map[resolver.ID]instance.Standing{}
	for _, s := range instance.Standings(sds.Items, tasks.Items) {
		standing[s.ID] = s
	}
	rows := map[resolver.ID]*row{}
	for i := range sds.Items {
		sd := &sds.Items[i]
		id := instance.ResolverID(sd.Spec.Deployment)
		r := &row{
			ID: id, Namespace: sd.Namespace, Applied: sd.Status.AppliedSequence, Active: sd.Status.ActiveSequence,
			App: sd.Spec.AppVersion, Ready: "Unknown", InCluster: true, Tombstone: sd.Spec.Tombstone(),
		}
		if sd.Spec.Driver.Name != "" {
			r.Driver = sd.Spec.Driver.String()
		}
		if cond := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionReady); cond != nil {
			r.Ready, r.Reason, r.Message = string(cond.Status), cond.Reason, mask(cond.Message)
		}
		if cond := apimeta.FindStatusCondition(sd.Status.Conditions, v1alpha1.ConditionStalled); cond != nil && cond.Status == "True" {
			r.Stalled, r.Reason, r.Message = true, cond.Reason, mask(cond.Message)
		}
		rows[id] = r
	}
	for id, s := range standing {
		r := rows[id]
		if r == nil {
			// No StyrminDeployment: not written yet, or deleted with its
			// instance, the tasks kept. Its active instance is then its
			// newest task's when that succeeded; a tombstone's says it
			// is deleted (not behind the tombstone at git's head).
			r = &row{ID: id, Namespace: s.Namespace, Ready: "Unknown", InCluster: true, Active: s.Active}
			if a := instance.TaskTarget(s.Newest); a != nil && a.Sequence == s.Active {
				r.Tombstone = a.Kind == v1alpha1.KindTombstone
			}
			rows[id] = r
		}
		r.Behind, r.Failed, r.Why = s.Behind, s.Failed, mask(s.Reason)
		if s.Newest != nil {
			r.Newest, r.NewestPhase = s.Newest.Name, string(s.Newest.Status.Phase)
			if r.NewestPhase == "" {
				r.NewestPhase = string(v1alpha1.TaskPending)
			}
		}
	}
	if gs != nil {
		for id, in := range gs.locks {
			if id.Cluster != c.Name {
				continue
			}
			r := rows[id]
			if r == nil {
				if in.Tombstone() {
					// Deleted before this cluster ever ran it, or
					// cleaned up after: nothing to show.
					continue
				}
				r = &row{ID: id, Ready: "Unknown", App: in.AppVersion, Driver: in.Driver.String(), Namespace: gs.namespaceOf(id)}
				rows[id] = r
			}
			r.Locked = in.Sequence
			if in.Sequence > r.Active {
				r.Behind = true
			}
		}
		for id, reason := range gs.held {
			if r := rows[id]; r != nil {
				r.Held = reason
			}
		}
	}
	byEnv := map[string][]row{}
	for _, r := range rows {
		cv.Count++
		if f.keeps(*r) {
			byEnv[r.ID.Environment] = append(byEnv[r.ID.Environment], *r)
		}
	}
	for _, env := range slices.Sorted(maps.Keys(byEnv)) {
		rs := byEnv[env]
		slices.SortFunc(rs, func(a, b row) int { return strings.Compare(a.ID.Name, b.ID.Name) })
		cv.Environments = append(cv.Environments, environmentView{Name: env, Rows: rs})
	}
	return cv
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
