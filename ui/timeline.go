package ui

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/resolver"
	"github.com/styrmin/styrmin/timeline"
)

type timelineData struct {
	Cluster string
	ID      resolver.ID
	Head    string
	// Entries are newest first.
	Entries []timelineRow
	// A and B are the entries diffed (0: none); Plan is their plan as
	// HTML, PlanError why there is none.
	A, B      int64
	Plan      template.HTML
	PlanError string
	// ClusterError says why the cluster's results are missing.
	ClusterError string
}

type timelineRow struct {
	timeline.Entry
	// Result, Task and Active are what the cluster knows of the entry:
	// its task's phase and name, and whether it is the active instance.
	Result, Task, TaskNamespace string
	Active                      bool
	// RanAs is the workflow the task ran when it is not the one git's
	// order selects (a change after a failed upgrade runs the upgrade:
	// the workflow is chosen against the active instance).
	RanAs string
}

func (h *Handler) timeline(w http.ResponseWriter, r *http.Request) {
	c, id, err := h.deploymentOf(r)
	if err != nil {
		h.fail(w, http.StatusNotFound, err)
		return
	}
	if h.o.Repo == nil {
		h.fail(w, http.StatusNotFound, errNoRepository)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	q := r.URL.Query()
	var a, b int64
	for _, p := range []struct {
		name string
		to   *int64
	}{{"a", &a}, {"b", &b}} {
		if s := q.Get(p.name); s != "" {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 1 {
				h.fail(w, http.StatusBadRequest, fmt.Errorf("%s=%q: expected a sequence number", p.name, s))
				return
			}
			*p.to = n
		}
	}
	d, code, err := h.timelineData(ctx, c, id, a, b)
	if err != nil {
		h.fail(w, code, err)
		return
	}
	h.render(w, "timeline", page{
		Title: "Timeline of " + id.String(), Data: d,
		Nav: []link{{"Overview", "/"}, {id.String(), deploymentHref(c.Name, id)}},
	})
}

func (h *Handler) timelineData(ctx context.Context, c *Cluster, id resolver.ID, a, b int64) (timelineData, int, error) {
	d := timelineData{Cluster: c.Name, ID: id, A: a, B: b}
	head, err := h.o.Repo.Head()
	if err != nil {
		return d, http.StatusBadGateway, fmt.Errorf("reading the repository's head: %w", err)
	}
	d.Head = head.Short()
	// What the cluster knows: the task of each sequence it still keeps,
	// and the active one.
	var tasks v1alpha1.StyrminTaskList
	labels := client.MatchingLabels(instance.DeploymentID(id).Labels())
	var active int64
	tasksErr := c.Reader.List(ctx, &tasks, labels)
	if tasksErr != nil {
		d.ClusterError = "listing StyrminTasks: " + mask(tasksErr.Error())
	}
	var sds v1alpha1.StyrminDeploymentList
	sdsErr := c.Reader.List(ctx, &sds, labels)
	if sdsErr == nil && len(sds.Items) > 0 {
		active = sds.Items[0].Status.ActiveSequence
	}
	// Reading a timeline walks every commit of the branch (under the
	// repository's lock, which the agent's syncer takes too): only for a
	// deployment git's head locks or the cluster has, not for any name a
	// request makes up.
	if len(sds.Items) == 0 && len(tasks.Items) == 0 && !h.lockedAt(head, id) {
		why := "the cluster has none"
		if err := cmp.Or(sdsErr, tasksErr); err != nil {
			why = "the cluster could not be read: " + mask(err.Error())
		}
		return d, http.StatusNotFound, fmt.Errorf("no deployment %s: git's head %s has no lockfile %s, and %s", id, head.Short(), h.history.LockPath(id), why)
	}
	entries, code, err := h.readTimeline(ctx, head, id)
	if err != nil {
		return d, code, err
	}
	bySeq := map[int64]*v1alpha1.StyrminTask{}
	for i := range tasks.Items {
		// An operation task (a backup, a restore) carries the deployment's
		// labels and the sequence and lock of the newest change it is
		// ordered after: its result is not that change's.
		if tasks.Items[i].Spec.Operation != nil {
			continue
		}
		bySeq[tasks.Items[i].Spec.ToSequence] = &tasks.Items[i]
	}
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		row := timelineRow{Entry: e, Active: active != 0 && e.Sequence == active}
		if t := bySeq[e.Sequence]; t != nil && t.Spec.Lock.Commit == e.Commit {
			row.Task, row.TaskNamespace, row.Result = t.Name, t.Namespace, string(t.Status.Phase)
			if w := string(t.Status.Workflow); w != "" && w != string(e.Workflow) {
				row.RanAs = w
			}
			if row.Result == "" {
				row.Result = string(v1alpha1.TaskPending)
			}
		}
		d.Entries = append(d.Entries, row)
	}
	if a != 0 || b != 0 {
		plan, err := h.diff(ctx, entries, id, a, b)
		if err != nil {
			d.PlanError = mask(err.Error())
		} else {
			d.Plan = plan
		}
	}
	return d, http.StatusOK, nil
}

// lockedAt tells whether git holds id's lockfile at head (valid or not:
// the timeline of a lockfile broken by hand says why each entry is).
func (h *Handler) lockedAt(head gitsource.Hash, id resolver.ID) bool {
	fsys, err := h.o.Repo.TreeAt(head, h.o.Dir)
	if err != nil {
		return false
	}
	info, err := fs.Stat(fsys, id.LockPath())
	return err == nil && info.Mode().IsRegular()
}

// readTimeline reads id's timeline at head, one walk of the history at a
// time: a timeline not read yet walks every commit of the branch, and the
// requests that arrive meanwhile (a page opened in many tabs, a script)
// then find it read rather than walk it again each. A request waits for
// its turn only as long as it lasts; then nothing is read for it.
func (h *Handler) readTimeline(ctx context.Context, head gitsource.Hash, id resolver.ID) ([]timeline.Entry, int, error) {
	if entries, ok := h.history.Remembered(head, id); ok {
		return entries, http.StatusOK, nil
	}
	select {
	case h.walking <- struct{}{}:
		defer func() { <-h.walking }()
	case <-ctx.Done():
	}
	if ctx.Err() != nil {
		// Also when both were ready: a request already gone reads
		// nothing either.
		return nil, http.StatusServiceUnavailable, fmt.Errorf("waiting for another timeline to be read from git: %w (reload the page)", context.Cause(ctx))
	}
	entries, err := h.history.Read(head, id)
	if err != nil {
		return nil, http.StatusInternalServerError, err
	}
	return entries, http.StatusOK, nil
}

// diff is the plan from entry a to entry b (the older one is the base):
// the base's lockfile against the configuration b locked, as the planner
// computes and renders it.
func (h *Handler) diff(ctx context.Context, entries []timeline.Entry, id resolver.ID, a, b int64) (template.HTML, error) {
	if a == 0 || b == 0 {
		return "", errors.New("choose two entries to compare (a and b)")
	}
	if a > b {
		a, b = b, a
	}
	ea, err := timeline.Find(entries, a)
	if err != nil {
		return "", err
	}
	eb, err := timeline.Find(entries, b)
	if err != nil {
		return "", err
	}
	base, err := gitsource.ParseHash(ea.Commit)
	if err != nil {
		return "", err
	}
	// The configuration b locked: its configuration commit's tree
	// resolves to b's instance (resolution is deterministic).
	headRev := eb.Commit
	if eb.ConfigCommit != "" {
		headRev = eb.ConfigCommit
	}
	head, err := gitsource.ParseHash(headRev)
	if err != nil {
		return "", err
	}
	return h.planHTML(ctx, base, head, fmt.Sprintf("sequence %d (%s)", a, base.Short()), fmt.Sprintf("sequence %d (%s)", b, head.Short()), map[resolver.ID]bool{id: true})
}

// planResult is one computed plan, rendered.
type planResult struct {
	html template.HTML
	err  error
	// until is when a failure is forgotten (zero: a plan, kept).
	until time.Time
}

// failureKept is how long a failed plan is remembered: the requests that
// waited for it share it, and a reload after that computes it again (a
// sandbox child killed, a driver not fetched, may not fail again).
const failureKept = 10 * time.Second

// planHTML computes the plan of head against base's lockfiles and renders
// it; remembered by the two commits (and the deployments kept). It waits
// for its turn to compute only as long as ctx (the request) lasts.
func (h *Handler) planHTML(ctx context.Context, base, head gitsource.Hash, baseName, headName string, only map[resolver.ID]bool) (template.HTML, error) {
	keys := make([]string, 0, len(only))
	for id := range only {
		keys = append(keys, id.String())
	}
	slices.Sort(keys)
	key := fmt.Sprintf("%s %s %v", base, head, keys)
	if r, ok := recall(&h.cacheMu, h.plans, key); ok && r.kept(h.o.Now()) {
		return r.html, r.err
	}
	release, err := h.turnToCompute(ctx)
	if err != nil {
		return "", err
	}
	defer release()
	if r, ok := recall(&h.cacheMu, h.plans, key); ok && r.kept(h.o.Now()) {
		// Computed while this request waited.
		return r.html, r.err
	}
	r := &planResult{}
	r.html, r.err = h.computePlan(base, head, baseName, headName, only)
	if r.err != nil {
		r.until = h.o.Now().Add(failureKept)
	}
	remember(&h.cacheMu, h.plans, key, r)
	return r.html, r.err
}

// kept tells whether a remembered plan still stands at now.
func (r *planResult) kept(now time.Time) bool {
	return r.until.IsZero() || now.Before(r.until)
}

func (h *Handler) computePlan(base, head gitsource.Hash, baseName, headName string, only map[resolver.ID]bool) (template.HTML, error) {
	baseFS, err := h.o.Repo.TreeAt(base, h.o.Dir)
	if err != nil {
		return "", err
	}
	headFS, err := h.o.Repo.TreeAt(head, h.o.Dir)
	if err != nil {
		return "", err
	}
	// The sequences head's history used, as styrminctl plan --head reads
	// them: a revert of a lock is a relock at the next number, not "no
	// changes".
	seqs, err := h.o.Repo.LockedSequences(head, h.o.Dir, "locks")
	if err != nil {
		return "", err
	}
	reused, err := h.o.Repo.ReusedSequences(head, h.o.Dir, "locks")
	if err != nil {
		return "", err
	}
	opts := h.o.PlanOptions
	opts.Only = only
	opts.Progress = nil
	p, err := h.o.Planner.ComputeTrees(planner.Trees{Base: baseFS, BaseName: baseName, Head: headFS, HeadName: headName, HeadCommit: head.String(),
		Used: resolver.UsedFromTrailers(seqs), Reused: resolver.ReusedFromHistory(reused)}, opts)
	if err != nil {
		return "", err
	}
	var buf bytes.Buffer
	if err := planner.RenderHTML(&buf, p, planner.RenderOptions{Full: true}); err != nil {
		return "", err
	}
	// RenderHTML escaped every value with html/template; placeholders
	// are masked once more, as on every page.
	return template.HTML(mask(buf.String())), nil //nolint:gosec // produced by html/template
}
