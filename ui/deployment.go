package ui

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/health"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/resolver"
)

// maxEvents bounds the events a page lists (the newest).
const maxEvents = 50

type deploymentData struct {
	Cluster string
	ID      resolver.ID
	// SD is the cluster's StyrminDeployment (nil: the cluster has none).
	SD *v1alpha1.StyrminDeployment
	// Row is the deployment's line of the overview.
	Row row
	// Settings are the resolved settings and the layer of each, at the
	// instance's source commit; SettingsError says why there are none.
	Settings      []setting
	SettingsError string
	// Values are the chart values of the instance, masked, as YAML.
	Values string
	Pods   []podView
	Events []eventView
	Tasks  []taskRow
	Error  string
}

type setting struct {
	Path, Value, Layer, File string
}

type podView struct {
	Name, Phase, Ready, Reason, Message string
	Restarts                            int32
}

type eventView struct {
	Time, Type, Reason, Object, Message string
	Count                               int32
}

type taskRow struct {
	Name, Namespace, Workflow, Phase, Started, Finished, Message string
	Sequence, From                                               int64
}

func (h *Handler) deployment(w http.ResponseWriter, r *http.Request) {
	c, id, err := h.deploymentOf(r)
	if err != nil {
		h.fail(w, http.StatusNotFound, err)
		return
	}
	ctx, cancel := h.ctx(r)
	defer cancel()
	d, code, err := h.deploymentData(ctx, c, id)
	if err != nil {
		h.fail(w, code, err)
		return
	}
	h.render(w, "deployment", page{
		Title: id.String(), Live: true, Data: d,
		Nav: []link{{"Overview", "/"}, {c.Name, "/?cluster=" + c.Name}},
	})
}

// deploymentOf reads the cluster and deployment a path names.
func (h *Handler) deploymentOf(r *http.Request) (*Cluster, resolver.ID, error) {
	id := resolver.ID{Cluster: r.PathValue("cluster"), Environment: r.PathValue("env"), Name: r.PathValue("name")}
	c, err := h.cluster(id.Cluster)
	return c, id, err
}

func (h *Handler) deploymentData(ctx context.Context, c *Cluster, id resolver.ID) (deploymentData, int, error) {
	d := deploymentData{Cluster: c.Name, ID: id}
	labels := client.MatchingLabels(instance.DeploymentID(id).Labels())
	var sds v1alpha1.StyrminDeploymentList
	if err := c.Reader.List(ctx, &sds, labels); err != nil {
		return d, http.StatusBadGateway, fmt.Errorf("listing StyrminDeployments: %s", mask(err.Error()))
	}
	var tasks v1alpha1.StyrminTaskList
	if err := c.Reader.List(ctx, &tasks, labels); err != nil {
		return d, http.StatusBadGateway, fmt.Errorf("listing StyrminTasks: %s", mask(err.Error()))
	}
	// The overview's line of this deployment, with git's head.
	view := h.clusterView(ctx, c, h.headState(), filter{Environment: id.Environment, Query: id.String()})
	for _, e := range view.Environments {
		for _, r := range e.Rows {
			if r.ID == id {
				d.Row = r
			}
		}
	}
	if len(sds.Items) == 0 && d.Row.ID != id {
		return d, http.StatusNotFound, fmt.Errorf("cluster %s has no deployment %s, and git locks none", c.Name, id)
	}
	namespace := d.Row.Namespace
	source := ""
	var values []byte
	if len(sds.Items) > 0 {
		d.SD = &sds.Items[0]
		namespace, source = d.SD.Namespace, d.SD.Spec.SourceCommit
		if d.SD.Spec.Values != nil {
			values = d.SD.Spec.Values.Raw
		}
	}
	if len(values) > 0 {
		d.Values = maskedYAML(values)
	}
	slices.SortFunc(tasks.Items, func(a, b v1alpha1.StyrminTask) int { return int(b.Spec.ToSequence - a.Spec.ToSequence) })
	for i := range tasks.Items {
		d.Tasks = append(d.Tasks, taskRowOf(&tasks.Items[i]))
	}
	if source != "" {
		d.Settings, d.SettingsError = h.settingsAt(ctx, source, id)
	} else {
		d.SettingsError = "the instance records no source commit"
	}
	// Pods and events are read where the cluster's own objects (the
	// StyrminDeployment, its tasks) say the deployment runs. One git locks
	// and the cluster never ran has nothing running yet, and the namespace
	// its lockfile names is git's word only: a lockfile edited by hand,
	// which the agent refuses, could name any namespace.
	if namespace != "" && (d.SD != nil || d.Row.InCluster) {
		d.Pods, d.Events, d.Error = h.podsAndEvents(ctx, c, namespace, nil)
	}
	return d, http.StatusOK, nil
}

// podsAndEvents reads a namespace's pods and its newest events (those of
// the StyrminTasks keep names, when given: then no pod). Every message a
// program may have written is shown masked with the namespace's
// sensitive values, or withheld when they cannot be read (the pods' by
// health.PodSummary, the events' by health.EventMessage).
func (h *Handler) podsAndEvents(ctx context.Context, c *Cluster, namespace string, keep map[string]bool) ([]podView, []eventView, string) {
	var problems []string
	var pods []podView
	// Read only when a pod or an event shows a message a program may
	// have written, once for both.
	sensitive := health.NamespaceSensitive(ctx, c.Live, namespace)
	if keep == nil {
		var list corev1.PodList
		if err := c.Live.List(ctx, &list, client.InNamespace(namespace)); err != nil {
			problems = append(problems, "listing pods: "+mask(err.Error()))
		}
		for i := range list.Items {
			pods = append(pods, podViewOf(&list.Items[i], sensitive))
		}
		slices.SortFunc(pods, func(a, b podView) int { return strings.Compare(a.Name, b.Name) })
	}
	var evs corev1.EventList
	if err := c.Live.List(ctx, &evs, client.InNamespace(namespace)); err != nil {
		problems = append(problems, "listing events: "+mask(err.Error()))
	}
	items := evs.Items
	if keep != nil {
		// A task's own events: those about it, or naming it as related.
		// By name and kind: a StatefulSet's pod web-2 is no task web-2.
		items = slices.DeleteFunc(items, func(e corev1.Event) bool {
			return !kept(keep, e.InvolvedObject) && (e.Related == nil || !kept(keep, *e.Related))
		})
	}
	slices.SortFunc(items, func(a, b corev1.Event) int { return eventTime(b).Compare(eventTime(a)) })
	var events []eventView
	for i := range items {
		if i == maxEvents {
			break
		}
		e := &items[i]
		events = append(events, eventView{
			Time: eventTime(*e).UTC().Format("2006-01-02 15:04:05Z"), Type: e.Type, Reason: e.Reason,
			Object: e.InvolvedObject.Kind + "/" + e.InvolvedObject.Name, Message: mask(health.EventMessage(e, sensitive)), Count: e.Count,
		})
	}
	return pods, events, strings.Join(problems, "; ")
}

// kept reports whether ref is one of the StyrminTasks keep names.
func kept(keep map[string]bool, ref corev1.ObjectReference) bool {
	return ref.Kind == "StyrminTask" && keep[ref.Name]
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// podViewOf shows a pod as the agent's status summarises it
// (health.PodSummary): a container's termination message that may be the
// end of its log is not shown, and one its program wrote is masked with
// the deployment's sensitive values (withheld when they cannot be read),
// as every viewer of the page may not read the pod's logs.
func podViewOf(p *corev1.Pod, sensitive health.SensitiveValues) podView {
	ps := health.PodSummary(p, sensitive)
	v := podView{Name: p.Name, Phase: ps.Phase, Ready: "False", Reason: ps.Reason, Message: mask(ps.Message), Restarts: ps.Restarts}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			v.Ready = string(c.Status)
		}
	}
	return v
}

func taskRowOf(t *v1alpha1.StyrminTask) taskRow {
	r := taskRow{Name: t.Name, Namespace: t.Namespace, Sequence: t.Spec.ToSequence, From: t.Status.FromSequence, Workflow: string(t.Status.Workflow), Phase: string(t.Status.Phase), Message: mask(t.Status.Message)}
	if r.Workflow == "" {
		r.Workflow = string(t.Spec.Workflow)
	}
	if r.Phase == "" {
		r.Phase = string(v1alpha1.TaskPending)
	}
	r.Started, r.Finished = stamp(t.Status.StartedAt), stamp(t.Status.FinishedAt)
	return r
}

func stamp(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// maskedYAML shows a JSON document as YAML with every placeholder masked.
func maskedYAML(raw []byte) string {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return mask(string(raw))
	}
	b, err := yaml.Marshal(maskValue(v))
	if err != nil {
		return mask(string(raw))
	}
	return string(b)
}

// settingsResult is the resolution of one deployment at one commit.
type settingsResult struct {
	settings []setting
	err      string
	// absent: the commit is not in the repository (yet: a replica's
	// clone behind the fetching one's), not remembered.
	absent bool
}

// settingsAt resolves the repository at commit, as `styrminctl explain`
// does, and returns id's settings with the layer and file of each;
// remembered by commit and deployment (a commit never changes). It waits
// for its turn to compute only as long as ctx (the request) lasts.
func (h *Handler) settingsAt(ctx context.Context, commit string, id resolver.ID) ([]setting, string) {
	if h.o.Repo == nil {
		return nil, "no repository: the layers of the values are read from git"
	}
	key := commit + " " + id.String()
	if r, ok := recall(&h.cacheMu, h.settings, key); ok {
		return r.settings, r.err
	}
	release, err := h.turnToCompute(ctx)
	if err != nil {
		return nil, err.Error()
	}
	defer release()
	if r, ok := recall(&h.cacheMu, h.settings, key); ok {
		return r.settings, r.err
	}
	r := &settingsResult{}
	r.settings, r.err, r.absent = h.resolveSettings(commit, id)
	if !r.absent {
		remember(&h.cacheMu, h.settings, key, r)
	}
	return r.settings, r.err
}

func (h *Handler) resolveSettings(commit string, id resolver.ID) (_ []setting, _ string, absent bool) {
	hash, err := gitsource.ParseHash(commit)
	if err != nil {
		return nil, fmt.Sprintf("source commit %q: %v", commit, err), false
	}
	fsys, err := h.o.Repo.TreeAt(hash, h.o.Dir)
	if err != nil {
		return nil, mask(err.Error()), true
	}
	ws, err := resolver.LoadWorkspace(fsys, resolver.WorkspaceOptions{SourceCommit: commit, DriverLimits: h.o.PlanOptions.DriverLimits, Sandbox: h.o.PlanOptions.Sandbox,
		ConfigSandbox: h.o.PlanOptions.ConfigSandbox})
	if err != nil {
		return nil, "resolving the repository at " + short(commit) + ": " + mask(err.Error()), false
	}
	// This deployment only (as plan --only does): a repository of 500
	// deployments resolves one in a fraction of the time.
	res := resolver.Resolve(ws.Repo, resolver.Options{Catalog: ws.Catalog, Locks: ws.Locks, SourceCommit: commit, Only: map[resolver.ID]bool{id: true}})
	rd, ok := res.Get(id)
	if !ok {
		for _, e := range res.Errors {
			if e.ID == id {
				return nil, mask(e.Error()), false
			}
		}
		return nil, fmt.Sprintf("%s is not defined at %s", id, short(commit)), false
	}
	all := map[string]any{"parameters": rd.Instance.Context.Parameters}
	for k, v := range rd.Settings {
		if k != "parameters" {
			all[k] = v
		}
	}
	var out []setting
	for _, p := range rd.Provenance.Paths() {
		o := rd.Provenance[p]
		b, _ := json.Marshal(maskValue(resolver.SettingAt(all, p)))
		out = append(out, setting{Path: p, Value: string(b), Layer: o.Layer, File: o.File})
	}
	return out, "", false
}
