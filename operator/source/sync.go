package source

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/gitsource"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/instance"
	"github.com/styrmin/styrmin/operator/internal/afterwrite"
	"github.com/styrmin/styrmin/operator/internal/eventnote"
	"github.com/styrmin/styrmin/operator/internal/metricsreg"
	"github.com/styrmin/styrmin/resolver"
)

// SourceRepo is what the syncer needs of the desired-state repository: a
// fetch of the tracked branch, the lock commits between two commits, the
// files at a commit and whether the branch only moved forward.
// *gitsource.Repo and *gitsource.Folder implement it.
type SourceRepo interface {
	Fetch(ctx context.Context) (gitsource.FetchResult, error)
	LockChanges(from, to gitsource.Hash, prefix string) ([]gitsource.LockChange, error)
	FS(commit gitsource.Hash) (fs.FS, error)
	Descends(head, from gitsource.Hash) (bool, error)
}

var (
	_ SourceRepo = (*gitsource.Repo)(nil)
	_ SourceRepo = (*gitsource.Folder)(nil)
)

// DefaultPollInterval is how often the syncer fetches when
// SyncerOptions.Interval is zero.
const DefaultPollInterval = time.Minute

// SyncerOptions configures a Syncer.
type SyncerOptions struct {
	// Client reads and writes StyrminSources, StyrminTasks, Namespaces
	// and reads StyrminDeployments.
	Client client.Client
	// APIReader reads the StyrminSource again when a status write of a
	// copy from Client (a cache) conflicts: the cache may well still hold
	// the same copy. Nil: Client.
	APIReader client.Reader
	// Repo is the agent's clone of the desired-state repository.
	Repo SourceRepo
	// Cluster is the cluster whose locks (locks/<cluster>/…) the agent
	// applies; the others are ignored.
	Cluster string
	// Path is the folder of the repository Repo views ("" or ".": its
	// root): with Cluster, what the recorded position is of.
	Path string
	// Source names the StyrminSource that keeps the sync position.
	Source types.NamespacedName
	// Spec is written on the StyrminSource (URL, branch…); informational.
	Spec v1alpha1.StyrminSourceSpec
	// Interval between polls; 0 means DefaultPollInterval.
	Interval time.Duration
	// Locks, when set, is where the tasks' instances are read: tasks are
	// created with a reference to their lock and no copy of the instance,
	// whose lockfile, as read, is handed over to Locks. Without it every task
	// carries its instance.
	Locks *instance.RepoLocks
	// Recorder records events on the StyrminSource (optional).
	Recorder events.EventRecorder
	// LockMode says the agent runs the lock mode, which writes the
	// StyrminSource's Locked condition: the syncer keeps it across its
	// conflicts. Without it, a Locked condition left from when the agent
	// ran one is removed when the syncer first reads the source.
	LockMode bool
	// Log receives the syncer's logs.
	Log logr.Logger
	// Registerer receives the sync metrics (nil: controller-runtime's
	// registry, served on the manager's metrics endpoint).
	Registerer prometheus.Registerer
}

// Syncer follows the desired-state repository: on an interval and on
// Trigger it fetches the branch, walks every lock commit of its cluster
// since the last one it synced and creates one StyrminTask per new
// (deployment, sequence). The position is kept in a StyrminSource, so a
// restarted agent resumes where it stopped; creating a task is idempotent,
// so a sync interrupted halfway is simply done again.
type Syncer struct {
	opts    SyncerOptions
	prefix  string
	trigger chan struct{}

	// mu serialises syncs (the poll loop and direct calls of Sync).
	mu sync.Mutex
	// position is the last synced commit as written to the StyrminSource;
	// loaded is false until it was read once.
	position gitsource.Hash
	loaded   bool
	// wrote is the resourceVersion the syncer's last write of the
	// StyrminSource was answered with: a cached copy older than it is read
	// again from the API server, since a sync decides from its conditions
	// (HistoryRewritten stands until it is resolved) and writes them back.
	wrote string
	// namespaces already known to exist, so each is created once; a
	// sync's tasks are created from several goroutines (createTasks). One
	// a task create finds gone or being deleted is forgotten.
	nsMu       sync.Mutex
	namespaces map[string]bool
	// refused are the lockfiles this sync's walk refused, recorded on the
	// StyrminSource with the sync's end (advance, setFailed): no write of
	// their own.
	refused []v1alpha1.RefusedLock
	// warned are the refusals (commit and path) an event was recorded for
	// since the position last moved: a sync that fails (a task the API
	// server keeps refusing) walks the same commits at every poll, and a
	// walk from the root records no refusal on the StyrminSource to tell
	// it met them before. warnedRewrite is the head a HistoryRewritten
	// event was recorded for, alike.
	warned        map[refusalKey]bool
	warnedRewrite gitsource.Hash
	// head is the commit the sync under way walks to: whether the branch
	// still holds a task's lock commit is asked against it.
	head gitsource.Hash

	metrics *syncMetrics
}

var (
	_ manager.Runnable               = (*Syncer)(nil)
	_ manager.LeaderElectionRunnable = (*Syncer)(nil)
)

// NewSyncer checks opts and returns a Syncer.
func NewSyncer(opts SyncerOptions) (*Syncer, error) {
	switch {
	case opts.Client == nil:
		return nil, errors.New("syncer: Client is required")
	case opts.Repo == nil:
		return nil, errors.New("syncer: Repo is required")
	case opts.Cluster == "":
		return nil, errors.New("syncer: Cluster is required")
	case opts.Source.Name == "" || opts.Source.Namespace == "":
		return nil, errors.New("syncer: Source needs a name and a namespace")
	}
	if opts.Interval <= 0 {
		opts.Interval = DefaultPollInterval
	}
	if opts.APIReader == nil {
		opts.APIReader = opts.Client
	}
	if opts.Spec.Cluster == "" {
		opts.Spec.Cluster = opts.Cluster
	}
	opts.Path = syncPath(opts.Path)
	if opts.Spec.Interval == nil {
		opts.Spec.Interval = &metav1.Duration{Duration: opts.Interval}
	}
	if opts.Registerer == nil {
		opts.Registerer = crmetrics.Registry
	}
	m, err := newSyncMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	return &Syncer{
		opts:       opts,
		prefix:     resolver.ClusterLocksDir(opts.Cluster),
		trigger:    make(chan struct{}, 1),
		namespaces: map[string]bool{},
		warned:     map[refusalKey]bool{},
		metrics:    m,
	}, nil
}

// Trigger asks for a sync now (a webhook calls it on push). It never
// blocks: triggers that arrive while one is pending are merged.
func (s *Syncer) Trigger() {
	select {
	case s.trigger <- struct{}{}:
	default:
	}
}

// NeedLeaderElection makes only the elected agent sync.
func (s *Syncer) NeedLeaderElection() bool { return true }

// Start syncs at once, then on every interval and trigger, until ctx ends.
// A failed sync is logged and recorded on the StyrminSource; the next poll
// tries again.
func (s *Syncer) Start(ctx context.Context) error {
	pollLoop(ctx, s.opts.Interval, s.trigger, func(ctx context.Context) {
		if _, err := s.Sync(ctx); err != nil && ctx.Err() == nil {
			s.opts.Log.Error(err, "sync failed", "source", s.opts.Source.String())
		}
	})
	return nil
}

// SyncResult says what one Sync did.
type SyncResult struct {
	// Head is the branch head that was synced.
	Head gitsource.Hash
	// Skipped is true when the head was already synced.
	Skipped bool
	// Created names the tasks created ("namespace/name"), in order.
	Created []string
	// Existing counts the tasks that already existed, or whose sequence
	// the deployment's StyrminDeployment already holds (a task deleted
	// with the history it fell out of is not made again).
	Existing int
	// Ignored counts lock changes that made no task (deleted lockfiles,
	// invalid lockfiles, tombstones of deployments never applied here,
	// earlier changes of a deployment deleted since, in a walk from the
	// root; locks the deployment already has, met again: after a force
	// push, or a lockfile whose bytes changed and not what it locks).
	Ignored int
	// BadTrailers counts the malformed Styrmin-Lock trailers skipped.
	BadTrailers int
	// Rewritten is true when the head does not descend from the last
	// synced commit (a force push or a rewind).
	Rewritten bool
	// SequenceUsed names the deployments ("cluster/env/name") whose lock
	// at the head has a sequence the cluster already used for other
	// content, so it is ignored (see ConditionHistoryRewritten).
	SequenceUsed []string
}

// Sync fetches the branch and creates the tasks of every lock commit since
// the last synced one, then records the head as synced.
func (s *Syncer) Sync(ctx context.Context) (SyncResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	res, err := s.sync(ctx)
	s.metrics.observe(res, err, time.Now())
	return res, err
}

func (s *Syncer) sync(ctx context.Context) (SyncResult, error) {
	var res SyncResult
	s.refused = nil

	src, err := s.source(ctx)
	if err != nil {
		return res, err
	}
	start := time.Now()
	fr, err := s.opts.Repo.Fetch(ctx)
	s.metrics.fetchDuration.WithLabelValues(metricsreg.ResultLabel(err)).Observe(time.Since(start).Seconds())
	if err != nil {
		reason := v1alpha1.ReasonFetchFailed
		if errors.Is(err, gitsource.ErrAuth) {
			reason = v1alpha1.ReasonAuthenticationFailed
		}
		s.setFailed(ctx, src, reason, err)
		return res, fmt.Errorf("sync %s: fetch: %w", gitsource.PublicURL(s.opts.Spec.URL), err)
	}
	res.Head, s.head = fr.Head, fr.Head
	if fr.Head == s.position {
		res.Skipped = true
		// Nothing to walk, but a failure recorded since the last sync (a
		// fetch refused, its credentials wrong) is over: this fetch
		// worked. Written only when the status says otherwise: a poll of
		// an unchanged branch writes nothing.
		if !syncedAt(src, fr.Head) {
			if err := s.advance(ctx, src, fr.Head); err != nil {
				return res, err
			}
		}
		return res, nil
	}
	if res.Rewritten, err = s.rewritten(src, fr.Head); err != nil {
		s.setFailed(ctx, src, v1alpha1.ReasonSyncFailed, err)
		return res, err
	}
	// The history is followed even when the walk failed: a task the API
	// server keeps refusing (a namespace stuck Terminating, a quota, an
	// admission webhook) fails every sync and holds the position, and a
	// force push meanwhile would never be reported. setFailed records the
	// condition with the walk's refusals.
	werr := s.walk(ctx, src, s.position, fr.Head, &res)
	if err := errors.Join(werr, s.followHistory(ctx, src, fr.Head, &res)); err != nil {
		s.setFailed(ctx, src, v1alpha1.ReasonSyncFailed, err)
		return res, err
	}
	if err := s.advance(ctx, src, fr.Head); err != nil {
		return res, err
	}
	s.opts.Log.Info("synced", "head", fr.Head.Short(), "created", len(res.Created), "existing", res.Existing, "ignored", res.Ignored)
	return res, nil
}

// source returns the StyrminSource, creating it on first use, and loads
// the sync position from it.
func (s *Syncer) source(ctx context.Context) (*v1alpha1.StyrminSource, error) {
	var src v1alpha1.StyrminSource
	_, err := afterwrite.Read(ctx, s.opts.Client, s.opts.APIReader, s.opts.Source, &src, s.wrote)
	if apierrors.IsNotFound(err) {
		src = v1alpha1.StyrminSource{
			ObjectMeta: metav1.ObjectMeta{Name: s.opts.Source.Name, Namespace: s.opts.Source.Namespace},
			Spec:       s.opts.Spec,
		}
		err = s.opts.Client.Create(ctx, &src)
		switch {
		case err == nil:
			s.wrote = src.ResourceVersion
		case apierrors.IsAlreadyExists(err):
			// Created by another writer, not in the cache yet.
			if err := s.opts.APIReader.Get(ctx, s.opts.Source, &src); err != nil {
				return nil, fmt.Errorf("reading StyrminSource %s: %w", s.opts.Source, err)
			}
		default:
			return nil, fmt.Errorf("creating StyrminSource %s: %w", s.opts.Source, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("reading StyrminSource %s: %w", s.opts.Source, err)
	}
	if !s.loaded {
		// A position that does not parse (edited by hand) restarts from the
		// root: creating tasks is idempotent and the guard keeps newer
		// instances, so walking again is safe.
		if src.Status.LastSyncedCommit != "" {
			h, err := gitsource.ParseHash(src.Status.LastSyncedCommit)
			if err != nil {
				s.opts.Log.Error(err, "ignoring the recorded sync position", "source", s.opts.Source.String())
			} else {
				s.position = h
			}
		}
		if err := s.forgetPositionOfOtherLocks(ctx, &src); err != nil {
			return nil, err
		}
		if err := s.forgetLockModeCondition(ctx, &src); err != nil {
			return nil, err
		}
		s.loaded = true
	}
	if !syncSpecEqual(src.Spec, s.opts.Spec) || src.Annotations[v1alpha1.AnnotationSyncPath] != s.opts.Path {
		src.Spec = s.opts.Spec
		if src.Annotations == nil {
			src.Annotations = map[string]string{}
		}
		src.Annotations[v1alpha1.AnnotationSyncPath] = s.opts.Path
		if err := s.opts.Client.Update(ctx, &src); err != nil {
			return nil, fmt.Errorf("updating StyrminSource %s: %w", s.opts.Source, err)
		}
	}
	return &src, nil
}

// forgetPositionOfOtherLocks drops a recorded position that was taken
// for another cluster's locks (spec.cluster) or another folder of the
// repository (AnnotationSyncPath): the commits walked up to it may hold
// this cluster's locks, never read. The next walk starts from the root,
// which is safe (see source). A StyrminSource that records no folder (an
// agent before it did) keeps its position: it was taken for this folder
// unless the agent's flags changed along with its version. The position
// is cleared on the StyrminSource before the spec and the annotation are
// rewritten, so an agent stopped in between walks from the root too.
func (s *Syncer) forgetPositionOfOtherLocks(ctx context.Context, src *v1alpha1.StyrminSource) error {
	path, recorded := src.Annotations[v1alpha1.AnnotationSyncPath]
	if src.Status.LastSyncedCommit == "" || (src.Spec.Cluster == s.opts.Spec.Cluster && (!recorded || path == s.opts.Path)) {
		return nil
	}
	s.opts.Log.Info("the recorded sync position is of other locks: walking from the root",
		"source", s.opts.Source.String(), "cluster", src.Spec.Cluster, "folder", path, "now cluster", s.opts.Spec.Cluster, "now folder", s.opts.Path)
	src.Status.LastSyncedCommit = ""
	// Refusals of the other locks are not this cluster's or folder's.
	src.Status.Refused = nil
	if err := s.opts.Client.Status().Update(ctx, src); err != nil {
		return fmt.Errorf("clearing the sync position of StyrminSource %s (taken for cluster %q, folder %q): %w", s.opts.Source, src.Spec.Cluster, path, err)
	}
	s.wrote = src.ResourceVersion
	s.position = gitsource.Hash{}
	return nil
}

// forgetLockModeCondition removes the Locked condition an agent in lock
// mode wrote, when this one runs none: it would say forever what a lock
// long ago held back. What that lock mode kept for the next (statuses
// the host had not taken, a head to lock again) goes with it: no lock
// mode takes it up, and one started months later would post or lock
// what no longer stands.
func (s *Syncer) forgetLockModeCondition(ctx context.Context, src *v1alpha1.StyrminSource) error {
	if s.opts.LockMode {
		return nil
	}
	kept := len(src.Status.LockStatuses) > 0 || src.Status.LockAgain != nil
	if !apimeta.RemoveStatusCondition(&src.Status.Conditions, v1alpha1.ConditionLocked) && !kept {
		return nil
	}
	src.Status.LockStatuses, src.Status.LockAgain = nil, nil
	if err := s.opts.Client.Status().Update(ctx, src); err != nil {
		return fmt.Errorf("removing the lock mode's Locked condition of StyrminSource %s (the agent runs no lock mode): %w", s.opts.Source, err)
	}
	s.wrote = src.ResourceVersion
	return nil
}

// ownConditions is the syncer's conditions own put on fresh, a copy of
// the StyrminSource read again after a conflict: fresh's Locked
// condition is kept in lock mode (its writer's), dropped otherwise.
func (s *Syncer) ownConditions(own, fresh []metav1.Condition) []metav1.Condition {
	if s.opts.LockMode {
		return keepLockerConditions(own, fresh)
	}
	return keepLockerConditions(own, nil)
}

// syncPath is a repository folder as the position records it: "." for
// the root, no leading or trailing slash ("deploy/" and "./deploy" are
// "deploy").
func syncPath(p string) string {
	p = path.Clean("/" + strings.Trim(p, "/"))
	if p == "/" {
		return "."
	}
	return strings.TrimPrefix(p, "/")
}

func syncSpecEqual(a, b v1alpha1.StyrminSourceSpec) bool {
	ad, bd := time.Duration(0), time.Duration(0)
	if a.Interval != nil {
		ad = a.Interval.Duration
	}
	if b.Interval != nil {
		bd = b.Interval.Duration
	}
	return a.URL == b.URL && a.Branch == b.Branch && a.Cluster == b.Cluster && a.SecretName == b.SecretName && ad == bd
}

// walk creates the tasks of the lock changes between from and to.
func (s *Syncer) walk(ctx context.Context, src *v1alpha1.StyrminSource, from, to gitsource.Hash, res *SyncResult) error {
	changes, err := s.opts.Repo.LockChanges(from, to, s.prefix)
	if err != nil && !from.IsZero() {
		// The recorded commit may be gone (the branch was rewritten and
		// collected): walk from the root, which is safe (see source).
		s.opts.Log.Error(err, "walking from the recorded commit failed; walking from the root", "from", from.Short())
		from = gitsource.Hash{}
		changes, err = s.opts.Repo.LockChanges(from, to, s.prefix)
	}
	if err != nil {
		return fmt.Errorf("sync: listing lock changes %s..%s: %w", from.Short(), to.Short(), err)
	}
	w := &syncWalk{s: s, from: from, to: to, prev: map[resolver.ID]*resolver.Instance{}, seen: map[resolver.ID]bool{}, accepted: map[resolver.ID]bool{},
		deleted: map[resolver.ID]int64{}, queued: map[resolver.ID]bool{}, rewritten: res.Rewritten && !from.IsZero()}
	var tasks []*v1alpha1.StyrminTask
	var reported gitsource.Hash
	for _, ch := range changes {
		if err := ctx.Err(); err != nil {
			return err
		}
		if len(ch.BadTrailers) > 0 && ch.Commit != reported {
			// The changes of one commit share its trailers: report once.
			reported = ch.Commit
			s.reportBadTrailers(src, ch, res)
		}
		task, err := w.apply(ctx, src, ch, res)
		if err != nil {
			return err
		}
		if task != nil {
			tasks = append(tasks, task)
		}
	}
	return s.createTasks(ctx, tasks, res)
}

// syncCreateConcurrency bounds the deployments whose tasks are created at
// once.
const syncCreateConcurrency = 16

// createTasks creates a walk's tasks, deployments in parallel and each
// deployment's tasks one after another in sequence order, so no task
// exists before an earlier one of its deployment (which it would wait
// for, or overtake). One lock commit can hold hundreds of deployments:
// created one after another, at two round trips each (namespace and
// task), they made the sync the slowest part of a large create.
//
// A task the API server refuses (its namespace being deleted, a quota, an
// admission webhook) holds back only its own deployment's later tasks:
// the other deployments' tasks are still made, and the error, naming each
// deployment refused and why, fails the sync so the position stays and
// the refused task is tried again at the next sync.
func (s *Syncer) createTasks(ctx context.Context, tasks []*v1alpha1.StyrminTask, res *SyncResult) error {
	groups := map[string][]int{}
	var order []string
	for i, t := range tasks {
		key := t.Namespace + "/" + t.Spec.Deployment.Name
		if _, ok := groups[key]; !ok {
			order = append(order, key)
		}
		groups[key] = append(groups[key], i)
	}
	existed := make([]bool, len(tasks))
	done := make([]bool, len(tasks))
	failed := make([]error, len(order))
	// Not errgroup.WithContext: one deployment's refusal must not cancel
	// the others' creates.
	var g errgroup.Group
	g.SetLimit(syncCreateConcurrency)
	for k, key := range order {
		g.Go(func() error {
			for n, i := range groups[key] {
				task := tasks[i]
				created, err := s.createTask(ctx, task)
				if err != nil {
					failed[k] = fmt.Errorf("%s (%s at %s): %w", instance.ResolverID(task.Spec.Deployment), task.Spec.Lock.Path, shortCommit(task.Spec.Lock.Commit), err)
					s.dropHandedOver(tasks, groups[key][n+1:])
					return nil
				}
				existed[i] = !created
				done[i] = true
			}
			return nil
		})
	}
	_ = g.Wait() // the goroutines report through failed
	// Reported in the walk's order, whatever order the creates ran in.
	for i, t := range tasks {
		switch {
		case !done[i]:
		case existed[i]:
			res.Existing++
		default:
			res.Created = append(res.Created, t.Namespace+"/"+t.Name)
		}
	}
	var refused taskErrors
	for _, err := range failed {
		if err != nil {
			refused = append(refused, err)
		}
	}
	if len(refused) > 0 {
		return refused
	}
	return nil
}

// dropHandedOver gives up the lockfiles handed over for tasks that were
// never tried (their deployment's earlier task failed).
func (s *Syncer) dropHandedOver(tasks []*v1alpha1.StyrminTask, idx []int) {
	if s.opts.Locks == nil {
		return
	}
	for _, i := range idx {
		s.opts.Locks.Drop(tasks[i].Spec.Lock)
	}
}

// taskErrors are the deployments whose tasks a sync could not make, one
// error each.
type taskErrors []error

func (e taskErrors) Error() string {
	// The first few name their deployments; a fan-out refused whole would
	// make a message longer than a condition may hold.
	shown := e[:min(len(e), maxListed)]
	msgs := make([]string, len(shown), len(shown)+1)
	for i, err := range shown {
		msgs[i] = err.Error()
	}
	if more := len(e) - len(shown); more > 0 {
		msgs = append(msgs, fmt.Sprintf("and %d more", more))
	}
	what := "the task of 1 deployment"
	if len(e) > 1 {
		what = "the tasks of " + strconv.Itoa(len(e)) + " deployments"
	}
	return fmt.Sprintf("sync: %s could not be made (tried again at the next sync; the others were made): %s", what, strings.Join(msgs, "; "))
}

// maxListed is how many deployments a condition's message names before
// it counts the rest.
const maxListed = 20

// maxMessage bounds a condition's message (the API allows 32 KiB; a
// status holds a summary, the log the whole error).
const maxMessage = 4096

// boundMessage cuts s to maxMessage bytes, on a character boundary.
func boundMessage(s string) string { return eventnote.Cut(s, maxMessage) }

func (e taskErrors) Unwrap() []error { return e }

// shortCommit is the abbreviation of a commit's hex name.
func shortCommit(c string) string {
	if len(c) > 7 {
		return c[:7]
	}
	return c
}

// syncWalk is the state of one walk: the previous instance of every
// deployment met so far, to choose each task's workflow.
type syncWalk struct {
	s    *Syncer
	from gitsource.Hash
	// fromFS is the tree at from, read lazily for the instance a
	// deployment had before the walk.
	fromFS fs.FS
	// to is the head walked to, and toFS its tree, read lazily by a walk
	// from the root; deleted holds, by deployment, the sequence of its
	// tombstone at to when nothing of it runs, else 0 (deletedAtHead).
	to      gitsource.Hash
	toFS    fs.FS
	deleted map[resolver.ID]int64
	// prev is each deployment's instance before the change being read,
	// summarised (see summary): what choosing a workflow and naming a
	// tombstone's namespace need. Whole, a walk over a fan-out of 2,000
	// deployments kept 2,000 decoded lockfiles until its tasks were
	// created.
	prev map[resolver.ID]*resolver.Instance
	seen map[resolver.ID]bool
	// accepted are the deployments whose prev this walk accepted (a task
	// is made for it), where a prev read at from may be a lockfile an
	// earlier walk refused.
	accepted map[resolver.ID]bool
	// queued are the deployments this walk has a task for already (made
	// at its end): a tombstone after one has something to delete.
	queued map[resolver.ID]bool
	// at is the commit whose changes are being read and atFS its files,
	// read once: a lock commit changes hundreds of lockfiles in one
	// folder, which a tree read afresh for each would decode each time.
	at   gitsource.Hash
	atFS fs.FS
	// rewritten is true when to does not descend from from (a force
	// push): the walk lists the new history's commits from the root of
	// the rewrite, and meets again the locks the replaced history had. By
	// path, replaced holds those locks (the lock changes reachable from
	// from and not from to) but the ones whose refusal stands on the
	// source, read on the first lock met again.
	rewritten bool
	replaced  map[string][]replacedLock
}

// replacedLock is a lockfile of the history a rewrite replaced: its
// commit and blob, and once decoded its sequence and digest.
type replacedLock struct {
	commit, blob gitsource.Hash
	decoded      bool
	seq          int64
	digest       string
}

// fsAt returns the files of commit, reusing those of the commit before.
func (w *syncWalk) fsAt(commit gitsource.Hash) (fs.FS, error) {
	if w.atFS != nil && w.at == commit {
		return w.atFS, nil
	}
	fsys, err := w.s.opts.Repo.FS(commit)
	if err != nil {
		return nil, err
	}
	w.at, w.atFS = commit, fsys
	return fsys, nil
}

// misplaced is the refusal of a lockfile that places its deployment in
// another namespace than the configuration at its commit gives it
// (instance.UndeclaredError), or whose configuration gives its deployment
// none (an environment it does not have, in a tree that holds the
// cluster's configuration): refused before its namespace is made or
// adopted, and before a task is put there. A namespace that
// holds the deployment already (its StyrminDeployment, read from the
// cache) is its own, checked when it was placed there: a walk over a
// long history evaluates no configuration for it. err is the trouble
// reading that configuration: the sync keeps its position and tries
// again.
func (w *syncWalk) misplaced(ctx context.Context, fsys fs.FS, ch gitsource.LockChange, next *resolver.Instance) (refusal, err error) {
	if w.s.opts.Locks == nil || next.Context == nil {
		return nil, nil
	}
	var sd v1alpha1.StyrminDeployment
	if err := w.s.opts.Client.Get(ctx, instance.Key(next.Context.Deployment.Namespace), &sd); err == nil && sd.Spec.Deployment == instance.DeploymentID(next.ID) {
		return nil, nil
	}
	ref := v1alpha1.LockRef{Commit: ch.Commit.String(), Path: ch.Path}
	_, err = w.s.opts.Locks.DeclaredPolicy(ctx, ref, next)
	if ue, ok := errors.AsType[*instance.UndeclaredError](err); ok {
		return ue.Err, nil
	}
	if pu, ok := errors.AsType[*instance.PolicyUnknownError](err); ok {
		if _, serr := fs.Stat(fsys, path.Join("clusters", next.ID.Cluster)); serr != nil {
			// No configuration of the cluster at all: the task's check of
			// the policy fails it, as it always did.
			return nil, nil
		}
		return fmt.Errorf("the configuration at the lock commit does not declare the deployment so: %w", pu.Err), nil
	}
	if err != nil {
		return nil, fmt.Errorf("sync: checking where %s places its deployment: %w", ch.Path, err)
	}
	return nil, nil
}

// apply reads one lock change and returns the task it makes (nil: none).
func (w *syncWalk) apply(ctx context.Context, src *v1alpha1.StyrminSource, ch gitsource.LockChange, res *SyncResult) (*v1alpha1.StyrminTask, error) {
	log := w.s.opts.Log.WithValues("commit", ch.Commit.Short(), "path", ch.Path)
	id, ok := resolver.IDFromLockPath(ch.Path)
	if !ok || id.Cluster != w.s.opts.Cluster {
		res.Ignored++
		return nil, nil
	}
	if ch.Deleted {
		// Lockfiles are never deleted by styrmin (a deleted deployment
		// leaves a tombstone): someone removed it by hand.
		w.refuse(src, ch, id, nil, v1alpha1.ReasonLockDeleted, "%s was deleted at %s; a removed deployment needs a tombstone lock, so nothing was changed", ch.Path, ch.Commit.Short())
		log.Info("ignoring a deleted lockfile")
		res.Ignored++
		return nil, nil
	}
	fsys, err := w.fsAt(ch.Commit)
	if err != nil {
		return nil, fmt.Errorf("sync: reading %s at %s: %w", ch.Path, ch.Commit.Short(), err)
	}
	// Through the resolver's reader, with its size limit and its refusal
	// of links: a lockfile is outside input.
	data, err := resolver.ReadLockFile(fsys, ch.Path)
	var next *resolver.Instance
	if err == nil {
		next, err = resolver.DecodeLock(ch.Path, data)
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, resolver.ErrUnreadable) {
		// The clone failed to give the file, not the file its check: the
		// sync fails and keeps its position, to read it again.
		return nil, fmt.Errorf("sync: reading %s at %s: %w", ch.Path, ch.Commit.Short(), err)
	}
	if err == nil && next.ID != id {
		err = fmt.Errorf("%s: the lockfile names deployment %s", ch.Path, next.ID)
	}
	if err == nil && next.Context != nil && next.Context.Deployment.Namespace == w.s.opts.Source.Namespace {
		// The agent's own namespace, whatever it is called (the
		// resolver's reserved list knows only the default name): its
		// Secrets and service account are not a deployment's to touch.
		err = fmt.Errorf("%s: field context.deployment.namespace: %q is the agent's namespace: no deployment runs there", ch.Path, next.Context.Deployment.Namespace)
	}
	if err == nil {
		err = resolver.ReservedPolicyNamespace(ch.Path, next)
	}
	if err == nil && next.Context != nil && next.Context.Environment.Policy != nil {
		// Nor may a policy let a deployment put objects there (a chart's
		// Deployment with the agent's service account would run as it).
		for i, ns := range next.Context.Environment.Policy.Namespaces {
			if ns == w.s.opts.Source.Namespace {
				err = fmt.Errorf("%s: field context.environment.policy.namespaces[%d]: %q is the agent's namespace: no deployment puts objects there; remove it from the environment's (or cluster's) policy.namespaces and lock again", ch.Path, i, ns)
				break
			}
		}
	}
	if err == nil {
		var werr error
		if err, werr = w.misplaced(ctx, fsys, ch, next); werr != nil {
			return nil, werr
		}
	}
	if err != nil {
		w.refuse(src, ch, id, next, v1alpha1.ReasonInvalidLock, "lock commit %s: %v; no task was created for it", ch.Commit.Short(), err)
		log.Error(err, "ignoring an invalid lockfile")
		res.Ignored++
		return nil, nil
	}
	prev, err := w.previous(id)
	if err != nil {
		return nil, err
	}
	if prev != nil && next.Sequence <= prev.Sequence {
		met, err := w.metAlready(ctx, src, ch, prev, next)
		if err != nil {
			return nil, err
		}
		if met {
			log.Info("a lock already applied or met before the history was rewritten: nothing to do", "deployment", id.String(), "sequence", next.Sequence)
			res.Ignored++
			return nil, nil
		}
		if next.Sequence == prev.Sequence && next.Digest == prev.Digest {
			// The lock the walk started from, refused when it was synced:
			// locked again (a force push keeping it), it still never runs.
			w.refuse(src, ch, id, next, v1alpha1.ReasonInvalidLock, "%s at %s: sequence %d is locked again, and the cluster neither runs it nor has its task (it was refused before); no task was created for it", ch.Path, ch.Commit.Short(), next.Sequence)
		} else {
			w.refuse(src, ch, id, next, v1alpha1.ReasonInvalidLock, "%s at %s: sequence %d does not follow %d; no task was created for it", ch.Path, ch.Commit.Short(), next.Sequence, prev.Sequence)
		}
		res.Ignored++
		return nil, nil
	}
	moved, err := w.namespaceMove(ctx, prev, next)
	if err != nil {
		return nil, err
	}
	if moved != "" {
		// Hand-edited, or locked by a styrminctl that did not refuse it:
		// the deployment keeps running where it is, and this lockfile is
		// not its previous instance for the next change.
		w.refuse(src, ch, id, next, v1alpha1.ReasonInvalidLock, "%s at %s: %s; no task was created for it", ch.Path, ch.Commit.Short(), moved)
		res.Ignored++
		return nil, nil
	}
	prevAccepted := w.accepted[id]
	w.prev[id] = summary(next)
	w.accepted[id] = true
	if next.Kind != resolver.KindTombstone {
		deleted, err := w.deletedAtHead(ctx, id, next.Sequence, gitsource.Hash(ch.Commit))
		if err != nil {
			return nil, err
		}
		if deleted {
			log.Info("a deployment deleted at the head and running nowhere: its earlier change is not made again", "deployment", id.String(), "sequence", next.Sequence)
			res.Ignored++
			return nil, nil
		}
	} else if gone, err := w.s.goneEverywhere(ctx, id, w.queued[id]); err != nil {
		return nil, err
	} else if gone {
		// Deleted already (this tombstone's task ran and was pruned, and
		// a walk meets it again): its task would delete nothing, and
		// make the deployment's namespace again.
		log.Info("tombstone of a deployment that nothing runs or waits to run: nothing to delete", "deployment", id.String(), "sequence", next.Sequence)
		res.Ignored++
		return nil, nil
	}

	task, err := w.s.taskFor(ctx, prev, next, prevAccepted, data, gitsource.Hash(ch.Commit), ch.Path)
	if err != nil {
		return nil, err
	}
	if task != nil {
		w.queued[id] = true
	}
	if task == nil {
		log.Info("tombstone of a deployment never applied in this cluster: nothing to delete", "deployment", id.String())
		res.Ignored++
	}
	return task, nil
}

// metAlready tells whether next, numbered at or below prev, is a lock the
// deployment already has rather than one out of order. The cluster
// decides, never the lock history alone: a lockfile met at the walk's
// start (prev read at from) may be one an earlier walk refused, and a
// lock that matches it locks something that never runs.
//
// Outside a rewrite, only prev itself is met again (a revert reverted,
// the lockfile's bytes changed and not what it locks): prev accepted by
// this walk (its task, made at the walk's end, runs it), or prev that
// the cluster runs or has a task of. An older lock is refused as before,
// even one the cluster runs: a lock commit reverted by hand while its
// task waits (its wave, a restore, its pre steps) does not roll back,
// the task runs, and the revert says so rather than show green.
//
// After a rewrite (a force push), a lock is met when the cluster runs it
// or has a task of it, or, its task pruned, when the cluster has reached
// its sequence and the history the rewrite replaced locked it without
// its refusal standing (lockedBefore). A force push that keeps every
// lockfile (git filter-repo removing a secret from another file's
// history, commits amended or signed again) gives every lock commit a new
// name, and the walk from the old position meets every lock again, at or
// below the sequence the old position holds: refused, each would be
// recorded on its new commit, whose status turns red, for a history the
// cluster already follows (a walk from the root, on a fresh clone,
// refuses none). A lock the old history refused is refused again, on its
// new commit: the new head locks something that never runs. The digest,
// not the bytes, decides: it leaves out the commit the lock was resolved
// from, which a rewrite of the configuration's history changes.
func (w *syncWalk) metAlready(ctx context.Context, src *v1alpha1.StyrminSource, ch gitsource.LockChange, prev, next *resolver.Instance) (bool, error) {
	same := next.Sequence == prev.Sequence && next.Digest == prev.Digest
	if same && w.accepted[next.ID] {
		return true, nil
	}
	if !w.rewritten && !same {
		return false, nil
	}
	if next.Context == nil || next.Context.Deployment.Namespace == "" {
		// A tombstone names no namespace: after a rewrite the lock
		// history tells; outside one, prev was read at from and may have
		// been refused.
		if !w.rewritten {
			return false, nil
		}
		return w.lockedBefore(src, ch, next)
	}
	ns, id := next.Context.Deployment.Namespace, instance.DeploymentID(next.ID)
	// Read from the cache: one read each, on this rare path only.
	var sd v1alpha1.StyrminDeployment
	switch err := w.s.opts.Client.Get(ctx, instance.Key(ns), &sd); {
	case err == nil:
		if sd.Spec.Deployment == id && sd.Spec.Sequence == next.Sequence && sd.Spec.Digest == next.Digest {
			return true, nil
		}
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("sync: reading the StyrminDeployment of %s: %w", ns, err)
	}
	name := v1alpha1.TaskName(next.ID.Name, next.Sequence)
	var task v1alpha1.StyrminTask
	switch err := w.s.opts.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &task); {
	case err == nil:
		if task.Spec.Deployment == id && task.Spec.Operation == nil && task.Spec.ToSequence == next.Sequence &&
			task.Spec.Target != nil && task.Spec.Target.Digest == next.Digest {
			return true, nil
		}
	case !apierrors.IsNotFound(err):
		return false, fmt.Errorf("sync: reading task %s/%s: %w", ns, name, err)
	}
	if !w.rewritten {
		return false, nil
	}
	// Its task pruned (or never made: a lock refused then). A task that
	// ran leaves the deployment at its sequence or past it: one the
	// cluster has not reached, with no task, never ran (the refusal of it
	// may have left the source's list, at most four of a commit).
	reached, err := w.reached(ctx, next)
	if err != nil || !reached {
		return false, err
	}
	return w.lockedBefore(src, ch, next)
}

// reached tells whether the deployment of next runs at next's sequence or
// past it, or runs nowhere (deleted since, or never run: the lock history
// tells).
func (w *syncWalk) reached(ctx context.Context, next *resolver.Instance) (bool, error) {
	var list v1alpha1.StyrminDeploymentList
	if err := w.s.opts.Client.List(ctx, &list, client.MatchingLabels(instance.DeploymentID(next.ID).Labels())); err != nil {
		return false, fmt.Errorf("sync: looking up the StyrminDeployment of %s: %w", next.ID, err)
	}
	if len(list.Items) == 0 {
		return true, nil
	}
	return slices.ContainsFunc(list.Items, func(sd v1alpha1.StyrminDeployment) bool { return sd.Spec.Sequence >= next.Sequence }), nil
}

// lockedBefore tells whether the history a rewrite replaced locked ch's
// lockfile at next's sequence with next's digest, and that lock's
// refusal does not stand on the source: it was applied when its commit
// was synced (or refused, and superseded since). A lock whose refusal
// stands never ran, and a new commit locking it again is refused again.
// The same blob is the same lock, with no read; another is decoded,
// once, to compare what it locks.
func (w *syncWalk) lockedBefore(src *v1alpha1.StyrminSource, ch gitsource.LockChange, next *resolver.Instance) (bool, error) {
	if w.replaced == nil {
		// The commits reachable from the old position and not from the
		// head: what the rewrite replaced, no more (read once a walk
		// meets a lock again: a forward move never does).
		changes, err := w.s.opts.Repo.LockChanges(w.to, w.from, w.s.prefix)
		if err != nil {
			return false, fmt.Errorf("sync: listing the lock changes the rewrite replaced (%s..%s): %w", w.to.Short(), w.from.Short(), err)
		}
		w.replaced = map[string][]replacedLock{}
		for _, c := range changes {
			key := refusalKey{commit: c.Commit.String(), path: c.Path}
			if !c.Deleted && !slices.ContainsFunc(src.Status.Refused, key.is) {
				w.replaced[c.Path] = append(w.replaced[c.Path], replacedLock{commit: c.Commit, blob: c.Blob})
			}
		}
	}
	locks := w.replaced[ch.Path]
	if !ch.Blob.IsZero() && slices.ContainsFunc(locks, func(l replacedLock) bool { return l.blob == ch.Blob }) {
		return true, nil
	}
	for i := range locks {
		l := &locks[i]
		if !l.decoded {
			fsys, err := w.s.opts.Repo.FS(l.commit)
			if err != nil {
				return false, fmt.Errorf("sync: reading the tree at %s: %w", l.commit.Short(), err)
			}
			in, err := resolver.ReadLock(fsys, ch.Path)
			if errors.Is(err, resolver.ErrUnreadable) {
				return false, fmt.Errorf("sync: reading %s at %s: %w", ch.Path, l.commit.Short(), err)
			}
			// One that does not decode locked nothing: it matches none.
			if err == nil {
				l.seq, l.digest = in.Sequence, in.Digest
			}
			l.decoded = true
		}
		if l.digest != "" && l.seq == next.Sequence && l.digest == next.Digest {
			return true, nil
		}
	}
	return false, nil
}

// namespaceMove says why next may not follow when it places the
// deployment in another namespace than the one it runs in ("" when it
// does not): a task there would install it afresh and leave the old
// namespace's release running, with no lock left to delete it. After a
// tombstone the deployment is added anew, wherever. A prev this walk
// accepted says where the deployment is (its task may not have run yet);
// a prev read at the walk's start may be a lockfile an earlier walk
// refused, so where it runs is read from the cluster: its
// StyrminDeployment that is not being deleted (runningNamespace), else,
// when it runs nowhere, prev's namespace.
func (w *syncWalk) namespaceMove(ctx context.Context, prev, next *resolver.Instance) (string, error) {
	if next.Kind == resolver.KindTombstone || next.Context == nil || next.Context.Deployment.Namespace == "" ||
		(prev != nil && prev.Kind == resolver.KindTombstone) {
		return "", nil
	}
	now := next.Context.Deployment.Namespace
	was, where := "", ""
	if prev != nil && prev.Context != nil {
		was, where = prev.Context.Deployment.Namespace, fmt.Sprintf("where sequence %d is locked", prev.Sequence)
	}
	// No prev (its lockfile deleted or broken by hand, a walk from the
	// root) is never accepted: the cluster says where it runs.
	if !w.accepted[next.ID] {
		var sd v1alpha1.StyrminDeployment
		err := w.s.opts.Client.Get(ctx, instance.Key(now), &sd)
		switch {
		case err == nil && sd.Spec.Deployment == instance.DeploymentID(next.ID):
			return "", nil // it runs there (the common case: one read from the cache)
		case err != nil && !apierrors.IsNotFound(err):
			return "", fmt.Errorf("sync: reading the StyrminDeployment of %s: %w", now, err)
		}
		ns, err := w.s.runningNamespace(ctx, next.ID)
		if err != nil {
			return "", err
		}
		if ns != "" {
			was, where = ns, "where it runs"
		}
	}
	if was == "" || was == now {
		return "", nil
	}
	return fmt.Sprintf("field context.deployment.namespace: %q, but the deployment is in %q (%s): a deployment does not move between namespaces (delete it with a tombstone, then add it again)",
		now, was, where), nil
}

// runningNamespace is the namespace of the deployment's StyrminDeployment
// that is not being deleted ("" when there is none): not holding a
// tombstone, not deleted, and with no tombstone's task after its sequence
// waiting in its namespace. A deployment deleted and added back elsewhere
// has its old StyrminDeployment until the tombstone's task has run.
func (s *Syncer) runningNamespace(ctx context.Context, id resolver.ID) (string, error) {
	var list v1alpha1.StyrminDeploymentList
	did := instance.DeploymentID(id)
	if err := s.opts.Client.List(ctx, &list, client.MatchingLabels(did.Labels())); err != nil {
		return "", fmt.Errorf("sync: looking up the StyrminDeployment of %s: %w", id, err)
	}
	for _, sd := range list.Items {
		if sd.Spec.Tombstone() || !sd.DeletionTimestamp.IsZero() {
			continue
		}
		var tasks v1alpha1.StyrminTaskList
		if err := s.opts.Client.List(ctx, &tasks, client.InNamespace(sd.Namespace), client.MatchingLabels(did.Labels())); err != nil {
			return "", fmt.Errorf("sync: looking up the tasks of %s: %w", id, err)
		}
		deleting := false
		for _, t := range tasks.Items {
			if t.Spec.Workflow == v1alpha1.WorkflowDelete && t.Spec.ToSequence > sd.Spec.Sequence && t.Status.Phase != v1alpha1.TaskFailed {
				deleting = true
				break
			}
		}
		if !deleting {
			return sd.Namespace, nil
		}
	}
	return "", nil
}

// deletedAtHead tells whether a walk must not make the task of a
// deployment's instance at seq: the deployment's lock at the head is a
// tombstone numbered after it and nothing of the deployment runs (it has
// no StyrminDeployment). A walk from the root (a first sync, or a
// position lost with a rewritten history) meets the deployment's whole
// history, and a walk from a position held by a refused task meets again
// changes the cluster ran since; the tasks that ran them may be pruned:
// making them again would install the deployment again, to be deleted
// once more by the tombstone's task, if that still exists.
func (w *syncWalk) deletedAtHead(ctx context.Context, id resolver.ID, seq int64, at gitsource.Hash) (bool, error) {
	if at == w.to {
		// A change of the head itself is what the head locks: no read
		// (a first sync of a large repository meets thousands).
		return false, nil
	}
	tomb, ok := w.deleted[id]
	if !ok {
		if w.toFS == nil {
			fsys, err := w.s.opts.Repo.FS(w.to)
			if err != nil {
				return false, fmt.Errorf("sync: reading the tree at %s: %w", w.to.Short(), err)
			}
			w.toFS = fsys
		}
		// A lockfile missing or invalid at the head says nothing of a
		// deletion: the change is made as before.
		in, err := resolver.ReadLock(w.toFS, id.LockPath())
		if errors.Is(err, resolver.ErrUnreadable) {
			return false, fmt.Errorf("sync: reading %s at %s: %w", id.LockPath(), w.to.Short(), err)
		}
		if err == nil && in.Kind == resolver.KindTombstone {
			ns, err := w.s.deploymentNamespace(ctx, id)
			if err != nil {
				return false, err
			}
			if ns == "" {
				tomb = in.Sequence
			}
		}
		w.deleted[id] = tomb
	}
	return seq < tomb, nil
}

// previous returns the instance a deployment had before the change being
// applied: the last one met in this walk, else its lockfile at the commit
// the walk started from.
func (w *syncWalk) previous(id resolver.ID) (*resolver.Instance, error) {
	if w.seen[id] {
		return w.prev[id], nil
	}
	w.seen[id] = true
	if w.from.IsZero() {
		return nil, nil
	}
	if w.fromFS == nil {
		fsys, err := w.s.opts.Repo.FS(w.from)
		if err != nil {
			return nil, fmt.Errorf("sync: reading the tree at %s: %w", w.from.Short(), err)
		}
		w.fromFS = fsys
	}
	in, err := resolver.ReadLock(w.fromFS, id.LockPath())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if errors.Is(err, resolver.ErrUnreadable) {
		// The clone failed to give it: without it the order check, the
		// workflow and a tombstone's namespace would be guessed.
		return nil, fmt.Errorf("sync: reading %s at %s: %w", id.LockPath(), w.from.Short(), err)
	}
	if err != nil {
		// An invalid earlier lock was reported when it was synced; for the
		// workflow it counts as no instance.
		return nil, nil //nolint:nilerr // see above
	}
	in = summary(in)
	w.prev[id] = in
	return in, nil
}

// summary is what a walk keeps of a deployment's instance for the next
// change of it: the fields SelectWorkflow and taskFor read, detached from
// the lockfile's text, which a string of a decoded instance keeps whole.
func summary(in *resolver.Instance) *resolver.Instance {
	s := &resolver.Instance{APIVersion: in.APIVersion, Kind: in.Kind, ID: in.ID, Sequence: in.Sequence,
		Digest: in.Digest, Driver: in.Driver, AppVersion: in.AppVersion}
	if in.Context != nil {
		s.Context = &drivers.Context{Deployment: in.Context.Deployment}
	}
	return s.Detached()
}

// SelectWorkflow returns the workflow the lock history suggests for the
// change from prev (nil: none) to next: instance.SelectWorkflow with prev
// as the active instance. The task chooses the workflow it runs when it
// starts, against what is active then.
func SelectWorkflow(prev, next *resolver.Instance) v1alpha1.Workflow {
	var active *v1alpha1.ActiveInstance
	if prev != nil {
		active = instance.Summary(prev, "")
	}
	return instance.SelectWorkflow(active, next)
}

// taskFor builds the task of next. A tombstone needs the namespace of the
// instance it deletes: its StyrminDeployment's, else prev's; with neither
// there is nothing to delete and taskFor returns nil.
func (s *Syncer) taskFor(ctx context.Context, prev, next *resolver.Instance, accepted bool, data []byte, commit gitsource.Hash, path string) (*v1alpha1.StyrminTask, error) {
	wf := SelectWorkflow(prev, next)
	ns := ""
	if next.Context != nil {
		ns = next.Context.Deployment.Namespace
	}
	if ns == "" {
		// A tombstone deletes the deployment where it is: where prev put
		// it when this walk accepted prev (its task may not have run
		// yet), else where it runs (the lockfile before it may be one
		// refused for another namespace), else where prev was locked.
		if !accepted || prev == nil || prev.Context == nil {
			var err error
			if ns, err = s.runningNamespace(ctx, next.ID); err != nil {
				return nil, err
			}
		}
		if ns == "" && prev != nil && prev.Context != nil {
			ns = prev.Context.Deployment.Namespace
		}
		if ns == "" {
			return nil, nil
		}
	}
	lock := v1alpha1.LockRef{Commit: commit.String(), Path: path}
	var copied *v1alpha1.StyrminDeploymentSpec
	if s.opts.Locks != nil {
		s.opts.Locks.HandOver(lock, data)
	} else {
		spec, err := instance.SpecFromInstance(next)
		if err != nil {
			return nil, fmt.Errorf("sync: %s: %w", path, err)
		}
		copied = &spec
	}
	var from int64
	if prev != nil {
		from = prev.Sequence
	}
	id := instance.DeploymentID(next.ID)
	labels := id.Labels()
	labels[v1alpha1.LabelSequence] = strconv.FormatInt(next.Sequence, 10)
	return &v1alpha1.StyrminTask{
		ObjectMeta: metav1.ObjectMeta{
			Name:      v1alpha1.TaskName(next.ID.Name, next.Sequence),
			Namespace: ns,
			Labels:    labels,
		},
		Spec: v1alpha1.StyrminTaskSpec{
			Deployment:   id,
			Namespace:    ns,
			Workflow:     wf,
			FromSequence: from,
			ToSequence:   next.Sequence,
			Lock:         lock,
			Target: &v1alpha1.TaskTarget{
				Kind: next.Kind, AppVersion: next.AppVersion, SourceCommit: next.SourceCommit, Digest: next.Digest,
				Driver: v1alpha1.DriverRef{Name: next.Driver.Name, Version: next.Driver.Version, Digest: next.Driver.Digest},
			},
			Instance: copied,
		},
	}, nil
}

// replaceDeletedDeploymentsTask handles a task found at the name of task
// (NAME-SEQUENCE): made for task's deployment, it is this one, made by an
// earlier sync (done false). Made for another deployment, it is the
// history of one deleted before task's deployment was added in the same
// namespace (an environment renamed, its namespacePrefix kept): that
// deployment's finished task is deleted so this one can be made (done
// true), where it would silently stand in its place; one not finished
// yet fails the sync, which tries again.
func (s *Syncer) replaceDeletedDeploymentsTask(ctx context.Context, existing, task *v1alpha1.StyrminTask) (done bool, err error) {
	if existing.Spec.Deployment == task.Spec.Deployment {
		return false, nil
	}
	wait := func(why string) (bool, error) {
		return false, fmt.Errorf("task %s/%s is deployment %s's (%s): %s's task of that name is made once %s is uninstalled from %s and its tasks have ended",
			existing.Namespace, existing.Name, existing.Spec.Deployment, why, task.Spec.Deployment, existing.Spec.Deployment, existing.Namespace)
	}
	if !existing.Status.Phase.Terminal() {
		return wait("not ended: " + cmp.Or(string(existing.Status.Phase), "new"))
	}
	// The other deployment may still be there (its tombstone's task
	// waiting, a lockfile placing a new deployment in a namespace taken):
	// its history is not deleted while it runs or has a task to run.
	var sds v1alpha1.StyrminDeploymentList
	if err := s.opts.Client.List(ctx, &sds, client.InNamespace(existing.Namespace), client.MatchingLabels(existing.Spec.Deployment.Labels())); err != nil {
		return false, fmt.Errorf("reading the StyrminDeployments of %s: %w", existing.Namespace, err)
	}
	if len(sds.Items) > 0 {
		return wait("its StyrminDeployment is still there")
	}
	var others v1alpha1.StyrminTaskList
	if err := s.opts.Client.List(ctx, &others, client.InNamespace(existing.Namespace), client.MatchingLabels(existing.Spec.Deployment.Labels())); err != nil {
		return false, fmt.Errorf("reading the tasks of %s: %w", existing.Namespace, err)
	}
	for _, o := range others.Items {
		if !o.Status.Phase.Terminal() {
			return wait(fmt.Sprintf("its task %s has not ended: %s", o.Name, cmp.Or(string(o.Status.Phase), "new")))
		}
	}
	if err := s.opts.Client.Delete(ctx, existing, client.Preconditions{UID: &existing.UID}); err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("deleting task %s/%s of deployment %s, which was in namespace %s before %s: %w", existing.Namespace, existing.Name, existing.Spec.Deployment, existing.Namespace, task.Spec.Deployment, err)
	}
	s.opts.Log.Info("deleted a finished task of a deployment that was in this namespace before", "task", existing.Name, "namespace", existing.Namespace,
		"was", existing.Spec.Deployment.String(), "now", task.Spec.Deployment.String())
	return true, nil
}

// namespaceFreeFor fails when task's namespace holds another deployment:
// its StyrminDeployment, or a task of it not ended (read from the cache,
// so a new deployment costs no request).
func (s *Syncer) namespaceFreeFor(ctx context.Context, task *v1alpha1.StyrminTask) error {
	wait := func(other v1alpha1.DeploymentID, why string) error {
		return fmt.Errorf("namespace %s holds deployment %s (%s): %s's first task is made once %s is uninstalled from it and its tasks have ended",
			task.Namespace, other, why, task.Spec.Deployment, other)
	}
	var sds v1alpha1.StyrminDeploymentList
	if err := s.opts.Client.List(ctx, &sds, client.InNamespace(task.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("reading the StyrminDeployments of %s: %w", task.Namespace, err)
	}
	for i := range sds.Items {
		if other := sds.Items[i].Spec.Deployment; other != task.Spec.Deployment {
			return wait(other, "its StyrminDeployment is still there")
		}
	}
	var tasks v1alpha1.StyrminTaskList
	if err := s.opts.Client.List(ctx, &tasks, client.InNamespace(task.Namespace), client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("reading the tasks of %s: %w", task.Namespace, err)
	}
	for i := range tasks.Items {
		o := &tasks.Items[i]
		if o.Spec.Deployment != task.Spec.Deployment && !o.Status.Phase.Terminal() {
			return wait(o.Spec.Deployment, fmt.Sprintf("its task %s has not ended: %s", o.Name, cmp.Or(string(o.Status.Phase), "new")))
		}
	}
	return nil
}

// createTask creates a task, and its namespace, unless the task exists or
// its deployment already runs its sequence; created says which. A task
// not created gives up the lockfile handed over for it.
func (s *Syncer) createTask(ctx context.Context, task *v1alpha1.StyrminTask) (created bool, err error) {
	defer func() {
		if !created && s.opts.Locks != nil {
			s.opts.Locks.Drop(task.Spec.Lock)
		}
	}()
	if applied, err := s.applied(ctx, task); err != nil || applied {
		return false, err
	}
	// Made by an earlier sync: one whose position did not move (another
	// deployment's task was refused) walks the same commits at every
	// poll, and would post every task of them again. The agent's client
	// reads it from its cache; a cache behind gets AlreadyExists below.
	var existing v1alpha1.StyrminTask
	withdrawnAgain := false
	if err := s.opts.Client.Get(ctx, client.ObjectKeyFromObject(task), &existing); err == nil {
		why := ""
		if withdrawnTask(&existing, task) {
			// Its lock commit left the branch and came back (a force push
			// undone, a mirror behind then caught up): the change it
			// withdrew is the branch's again, and runs.
			why = "a withdrawn change is on the branch again: its task is made again"
		} else if by, err := s.supersededByWithdrawn(ctx, &existing, task); err != nil {
			return false, err
		} else if by != "" {
			// Superseded before it ran by a change the branch withdrew
			// since (a force push back to this one's commit): neither was
			// applied, and this one is what the branch locks.
			why = "a change superseded by one the branch withdrew since is the branch's again: its task is made again"
		}
		if withdrawnAgain = why != ""; withdrawnAgain {
			err := s.opts.Client.Delete(ctx, &existing, client.Preconditions{UID: &existing.UID})
			if apierrors.IsConflict(err) {
				// Another UID: an earlier sync made it again already (the
				// cache is behind).
				return false, nil
			}
			if err != nil && !apierrors.IsNotFound(err) {
				return false, fmt.Errorf("deleting task %s/%s, to make it again as its lock commit is the branch's: %w", existing.Namespace, existing.Name, err)
			}
			s.opts.Log.Info(why, "task", existing.Name, "namespace", existing.Namespace)
		} else if done, err := s.replaceDeletedDeploymentsTask(ctx, &existing, task); err != nil || !done {
			return false, err
		}
	} else if !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("reading task %s/%s: %w", task.Namespace, task.Name, err)
	}
	if task.Spec.Workflow == v1alpha1.WorkflowCreate {
		// A deployment added where one deleted in the same push still runs
		// (its tombstone's task not run yet): whatever the tasks' names
		// (the old one's first may be pruned), the new one's first task
		// waits until the old one is uninstalled and its tasks ended.
		if err := s.namespaceFreeFor(ctx, task); err != nil {
			return false, err
		}
	}
	for retried := false; ; retried = true {
		if err := s.ensureNamespace(ctx, task.Namespace, task.Spec.Deployment); err != nil {
			return false, err
		}
		err = s.opts.Client.Create(ctx, task)
		if !namespaceRefused(err) {
			break
		}
		// The namespace was deleted since the syncer made or found it (by
		// a person, say), or is being deleted: it is made again, now if it
		// is gone, else at a later sync once it is.
		s.forgetNamespace(task.Namespace)
		if retried || !apierrors.IsNotFound(err) {
			break
		}
	}
	switch {
	case apierrors.IsAlreadyExists(err) && withdrawnAgain:
		// The withdrawn one is not gone yet: the sync keeps its position.
		return false, fmt.Errorf("creating task %s/%s: the one withdrawn before is still being deleted", task.Namespace, task.Name)
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("creating task %s/%s: %w", task.Namespace, task.Name, err)
	}
	s.opts.Log.Info("task created", "task", task.Name, "namespace", task.Namespace, "workflow", task.Spec.Workflow)
	return true, nil
}

// withdrawnTask tells whether existing, found at task's name, is task's
// deployment's change ended as withdrawn (its lock commit was no longer
// on the branch when its turn came): task, the sync's, finds it on the
// branch again. Such a task ran nothing.
func withdrawnTask(existing, task *v1alpha1.StyrminTask) bool {
	if existing.Spec.Deployment != task.Spec.Deployment || existing.Status.Phase != v1alpha1.TaskSuperseded {
		return false
	}
	c := apimeta.FindStatusCondition(existing.Status.Conditions, v1alpha1.ConditionReady)
	return c != nil && c.Reason == v1alpha1.ReasonTaskWithdrawn
}

// supersededByWithdrawn returns the name of the task that superseded
// existing, found at task's name, when that one wrote nothing and the
// branch withdrew it: existing, task's deployment's change of task's
// instance, ended Superseded before a step of it started (it wrote
// nothing), and the task that superseded it is gone, ended withdrawn, or
// has not started and its lock commit is not on the branch the sync
// walks to (its own turn ends it withdrawn: the task controller learns of
// the force push from this sync's fetch). Existing is then the branch's
// change again, not applied, and is made again. "" when not so: one
// superseded by a change the branch holds stays superseded. The
// superseding task is read (from the cache) only for a task so ended.
func (s *Syncer) supersededByWithdrawn(ctx context.Context, existing, task *v1alpha1.StyrminTask) (string, error) {
	if existing.Spec.Deployment != task.Spec.Deployment || existing.Spec.Operation != nil || existing.Status.Phase != v1alpha1.TaskSuperseded ||
		existing.Withdrawn() || ranAStep(existing) || existing.Status.SupersededBy <= existing.Spec.ToSequence ||
		existing.Spec.Target == nil || task.Spec.Target == nil || existing.Spec.Target.Digest != task.Spec.Target.Digest {
		return "", nil
	}
	name := v1alpha1.TaskName(existing.Spec.Deployment.Name, existing.Status.SupersededBy)
	var by v1alpha1.StyrminTask
	err := s.opts.Client.Get(ctx, client.ObjectKey{Namespace: existing.Namespace, Name: name}, &by)
	switch {
	case apierrors.IsNotFound(err):
		return name, nil
	case err != nil:
		return "", fmt.Errorf("reading task %s/%s, which superseded %s: %w", existing.Namespace, name, existing.Name, err)
	case by.Spec.Deployment != existing.Spec.Deployment || by.Withdrawn():
		return name, nil
	case by.Status.Phase.Terminal() || by.Status.Phase == v1alpha1.TaskRunning || ranAStep(&by) || s.head.IsZero():
		return "", nil
	}
	commit, err := gitsource.ParseHash(by.Spec.Lock.Commit)
	if err != nil {
		return "", nil //nolint:nilerr // a lock its own turn fails on
	}
	held, err := s.opts.Repo.Descends(s.head, commit)
	if err != nil {
		return "", fmt.Errorf("sync: does the branch at %s hold %s's lock commit %s: %w", s.head.Short(), name, commit.Short(), err)
	}
	if held {
		return "", nil
	}
	return name, nil
}

// ranAStep reports whether a step of t started: it may have written.
func ranAStep(t *v1alpha1.StyrminTask) bool {
	return slices.ContainsFunc(t.Status.Steps, func(st v1alpha1.TaskStep) bool { return st.StartedAt != nil || st.Attempts > 0 })
}

// namespaceRefused tells whether a create was refused for its namespace:
// there is none, or it is being deleted.
func namespaceRefused(err error) bool {
	if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
		return true
	}
	var st apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &st) {
		return false
	}
	d := st.Status().Details
	return d != nil && d.Kind == "namespaces"
}

// applied tells whether the deployment's StyrminDeployment already runs
// the task's sequence or a later one (spec.sequence, which only tasks
// write; not the guard's annotation, which a person may raise and which
// the task's own guard must meet): the task ran, and may have been deleted
// since with the history it fell out of (a walk from the root meets its
// lock again). Running it again would end Superseded at best, after its
// pre steps.
func (s *Syncer) applied(ctx context.Context, task *v1alpha1.StyrminTask) (bool, error) {
	var sd v1alpha1.StyrminDeployment
	err := s.opts.Client.Get(ctx, instance.Key(task.Namespace), &sd)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the StyrminDeployment of %s: %w", task.Namespace, err)
	}
	if sd.Spec.Deployment != task.Spec.Deployment {
		// The namespace holds another deployment (not deleted yet, or a
		// lock that names a taken namespace): its sequence says nothing
		// of this one, whose task is made to fail where it shows.
		return false, nil
	}
	return sd.Spec.Sequence >= task.Spec.ToSequence, nil
}

// goneEverywhere reports whether nothing of a deployment runs or waits to
// run: this walk has no task for it (queued), and it has no
// StyrminDeployment and no unfinished task (a create not run yet is
// deleted by the tombstone's task after it). The tasks are listed from
// the API server: a cache may not show one an earlier sync made a moment
// ago, whose deployment the tombstone must delete.
func (s *Syncer) goneEverywhere(ctx context.Context, id resolver.ID, queued bool) (bool, error) {
	if queued {
		return false, nil
	}
	if ns, err := s.deploymentNamespace(ctx, id); err != nil || ns != "" {
		return false, err
	}
	var tasks v1alpha1.StyrminTaskList
	if err := s.opts.APIReader.List(ctx, &tasks, client.MatchingLabels(instance.DeploymentID(id).Labels())); err != nil {
		return false, fmt.Errorf("sync: looking up the tasks of %s: %w", id, err)
	}
	for i := range tasks.Items {
		if !tasks.Items[i].Status.Phase.Terminal() {
			return false, nil
		}
	}
	return true, nil
}

// deploymentNamespace finds the namespace of a deployment's
// StyrminDeployment, "" when there is none.
func (s *Syncer) deploymentNamespace(ctx context.Context, id resolver.ID) (string, error) {
	var list v1alpha1.StyrminDeploymentList
	sel := instance.DeploymentID(id).Labels()
	if err := s.opts.Client.List(ctx, &list, client.MatchingLabels(sel)); err != nil {
		return "", fmt.Errorf("sync: looking up the StyrminDeployment of %s: %w", id, err)
	}
	for _, sd := range list.Items {
		return sd.Namespace, nil
	}
	return "", nil
}

// ensureNamespace creates a deployment's namespace on first use.
func (s *Syncer) ensureNamespace(ctx context.Context, name string, id v1alpha1.DeploymentID) error {
	s.nsMu.Lock()
	known := s.namespaces[name]
	s.nsMu.Unlock()
	if known {
		return nil
	}
	if err := instance.CreateNamespace(ctx, s.opts.Client, name, id); err != nil {
		return err
	}
	s.nsMu.Lock()
	s.namespaces[name] = true
	s.nsMu.Unlock()
	return nil
}

// forgetNamespace makes ensureNamespace create the namespace again.
func (s *Syncer) forgetNamespace(name string) {
	s.nsMu.Lock()
	delete(s.namespaces, name)
	s.nsMu.Unlock()
}

// syncedAt tells whether src's status already records head as fetched
// and synced, Ready and not Stalled, for its current spec.
func syncedAt(src *v1alpha1.StyrminSource, head gitsource.Hash) bool {
	st := src.Status
	return st.LastSyncedCommit == head.String() && st.LastFetchedCommit == head.String() && st.ObservedGeneration == src.Generation &&
		apimeta.IsStatusConditionTrue(st.Conditions, v1alpha1.ConditionReady) &&
		apimeta.FindStatusCondition(st.Conditions, v1alpha1.ConditionStalled) == nil
}

// advance records head as synced.
func (s *Syncer) advance(ctx context.Context, src *v1alpha1.StyrminSource, head gitsource.Hash) error {
	now := metav1.Now()
	src.Status.ObservedGeneration = src.Generation
	src.Status.LastSyncedCommit = head.String()
	src.Status.LastFetchedCommit = head.String()
	src.Status.LastSyncTime = &now
	src.Status.Refused = withRefused(src.Status.Refused, s.refused)
	apimeta.SetStatusCondition(&src.Status.Conditions, metav1.Condition{
		Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: v1alpha1.ReasonSynced,
		Message: "synced " + head.Short(), ObservedGeneration: src.Generation,
	})
	apimeta.RemoveStatusCondition(&src.Status.Conditions, v1alpha1.ConditionStalled)
	written := src
	err := s.opts.Client.Status().Update(ctx, src)
	if apierrors.IsConflict(err) {
		// The copy read at the start of the sync was older than the object
		// (another writer: a sync requested by annotation; or, for a new
		// syncer, a cache behind an earlier agent's write): read it again,
		// from the API server (the cache may still hold the same copy). The
		// conditions are the sync's own, decided from a copy no older than
		// its last write.
		var fresh v1alpha1.StyrminSource
		if err = s.opts.APIReader.Get(ctx, s.opts.Source, &fresh); err == nil && s.syncedPast(fresh.Status.LastSyncedCommit, head) {
			// Another syncer recorded a position this head does not
			// reach (the next leader, while this replica, its lease
			// lost, finished a sync of an older head): it stays.
			s.opts.Log.Info("another syncer recorded a newer position; it is kept", "source", s.opts.Source.String(),
				"head", head.Short(), "recorded", shortCommit(fresh.Status.LastSyncedCommit))
			s.position, s.wrote = head, fresh.ResourceVersion
			return nil
		}
		if err == nil {
			fresh.Status.ObservedGeneration = fresh.Generation
			fresh.Status.LastSyncedCommit = head.String()
			fresh.Status.LastFetchedCommit = head.String()
			fresh.Status.LastSyncTime = &now
			fresh.Status.Conditions = s.ownConditions(src.Status.Conditions, fresh.Status.Conditions)
			fresh.Status.Refused = withRefused(fresh.Status.Refused, s.refused)
			err = s.opts.Client.Status().Update(ctx, &fresh)
			written = &fresh
		}
	}
	if err != nil {
		return fmt.Errorf("sync: recording %s as synced on StyrminSource %s: %w", head.Short(), s.opts.Source, err)
	}
	if s.position != head {
		// The next walk starts past the commits warned of.
		clear(s.warned)
	}
	s.position = head
	s.wrote = written.ResourceVersion
	return nil
}

// syncedPast tells whether recorded, the position a StyrminSource read
// again after a conflict holds, is another syncer's past head: a commit
// other than head and this syncer's own position that head does not
// descend from, or that this clone does not hold (fetched by a syncer
// further on). Writing head over it would move the position back.
func (s *Syncer) syncedPast(recorded string, head gitsource.Hash) bool {
	if recorded == "" || recorded == head.String() || recorded == s.position.String() {
		return false
	}
	h, err := gitsource.ParseHash(recorded)
	if err != nil {
		return false
	}
	descends, err := s.opts.Repo.Descends(head, h)
	return err == nil && !descends
}

// setFailed records a failed sync on the StyrminSource (best effort: the
// error is returned to the caller anyway), with the lockfiles its walk
// refused: a sync held by a task the API server refuses fails at every
// poll, and the refusals of the commits it walks would otherwise never be
// recorded (their statuses on the git host would turn green once their
// other tasks succeeded). The refusals are decided as at a successful
// end: each lockfile on its own, from the lock history and the cluster.
func (s *Syncer) setFailed(ctx context.Context, src *v1alpha1.StyrminSource, reason string, err error) {
	failed := func(src *v1alpha1.StyrminSource) {
		src.Status.Refused = withRefused(src.Status.Refused, s.refused)
		apimeta.SetStatusCondition(&src.Status.Conditions, metav1.Condition{
			Type: v1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: reason,
			Message: boundMessage(err.Error()), ObservedGeneration: src.Generation,
		})
		if reason == v1alpha1.ReasonAuthenticationFailed {
			apimeta.SetStatusCondition(&src.Status.Conditions, metav1.Condition{
				Type: v1alpha1.ConditionStalled, Status: metav1.ConditionTrue, Reason: reason,
				Message: boundMessage(err.Error()), ObservedGeneration: src.Generation,
			})
		}
	}
	failed(src)
	written := src
	uerr := s.opts.Client.Status().Update(ctx, src)
	if apierrors.IsConflict(uerr) {
		// An older copy, as in advance: the failure goes on a fresh one,
		// with the sync's conditions (HistoryRewritten, followed above).
		var fresh v1alpha1.StyrminSource
		if uerr = s.opts.APIReader.Get(ctx, s.opts.Source, &fresh); uerr == nil {
			failed(&fresh)
			fresh.Status.Conditions = s.ownConditions(src.Status.Conditions, fresh.Status.Conditions)
			uerr = s.opts.Client.Status().Update(ctx, &fresh)
			written = &fresh
		}
	}
	if uerr != nil {
		s.opts.Log.Error(uerr, "recording the failed sync", "source", s.opts.Source.String())
		return
	}
	s.wrote = written.ResourceVersion
}

// refuse reports a lockfile of ch (of deployment id; next when it was
// decoded) that is not applied: an event, and an entry of the
// StyrminSource's refused list, which the commit's status on the git host
// counts (a commit whose tasks all succeeded is not green when one of its
// lockfiles was refused). It is recorded with the sync's end, successful
// (advance) or not (setFailed): a sync that fails walks the same commits
// again and refuses the same lockfiles, recorded once; their event is
// recorded once too. A walk from the root records none: it meets commits
// synced long ago (a lost position, a new agent), which their statuses
// reported then, and decides from the cluster as it is now (a deployment
// moved since).
func (w *syncWalk) refuse(src *v1alpha1.StyrminSource, ch gitsource.LockChange, id resolver.ID, next *resolver.Instance, reason, format string, args ...any) {
	key := refusalKey{commit: ch.Commit.String(), path: ch.Path}
	if !w.s.warned[key] && !slices.ContainsFunc(src.Status.Refused, key.is) {
		w.s.warn(src, reason, format, args...)
	}
	w.s.warned[key] = true
	if w.from.IsZero() {
		return
	}
	// The sequence a later change of the deployment passes: the refused
	// one's, or the one it follows, whichever is higher.
	var seq int64
	if next != nil {
		seq = next.Sequence
	}
	if prev, err := w.previous(id); err == nil && prev != nil {
		seq = max(seq, prev.Sequence)
	}
	w.s.refused = append(w.s.refused, v1alpha1.RefusedLock{
		Commit: ch.Commit.String(), Path: ch.Path, Reason: reason, Sequence: seq,
		Message: eventnote.Cut(fmt.Sprintf(format, args...), maxRefusedMessage), Time: metav1.Now(),
	})
}

// maxRefusedMessage bounds a refused lockfile's message (the CRD's bound).
const maxRefusedMessage = 1024

// refusalKey names a refused lockfile: its commit and path.
type refusalKey struct{ commit, path string }

func (k refusalKey) is(r v1alpha1.RefusedLock) bool { return r.Commit == k.commit && r.Path == k.path }

// maxRefusedPerCommit bounds the refusals kept of one lock commit. One is
// enough for the commit's status on the git host to fail; the others name
// more of its deployments (in a description cut at 140 characters). A
// fan-out whose lockfiles are refused whole would otherwise fill the list
// and push out every other commit's refusal.
const maxRefusedPerCommit = 4

// withRefused adds to have the refusals of a sync that it does not hold
// yet (a walk that meets a commit again refuses its lockfile again; the
// first time is kept), at most maxRefusedPerCommit of a commit. Past
// MaxRefusedLocks (the CRD's bound: a longer list is refused by the API
// server, and with it the sync's status write), what keeps a commit's
// status failing goes last: first the refusals beyond a commit's first,
// the highest ranks and the oldest commits first, then, one refusal per
// commit left, the oldest commits' (whose statuses the reporter posted
// long ago).
func withRefused(have, add []v1alpha1.RefusedLock) []v1alpha1.RefusedLock {
	perCommit := map[string]int{}
	for _, h := range have {
		perCommit[h.Commit]++
	}
	for _, r := range add {
		key := refusalKey{commit: r.Commit, path: r.Path}
		if perCommit[r.Commit] < maxRefusedPerCommit && !slices.ContainsFunc(have, key.is) {
			have = append(have, r)
			perCommit[r.Commit]++
		}
	}
	over := len(have) - v1alpha1.MaxRefusedLocks
	if over <= 0 {
		return have
	}
	// rank is a refusal's place among its commit's, 0 for the first.
	rank := make([]int, len(have))
	clear(perCommit)
	for i, h := range have {
		rank[i] = perCommit[h.Commit]
		perCommit[h.Commit]++
	}
	drop := make([]bool, len(have))
	for r := maxRefusedPerCommit - 1; r > 0 && over > 0; r-- {
		for i := range have {
			if over > 0 && rank[i] == r && !drop[i] {
				drop[i] = true
				over--
			}
		}
	}
	for i := range have {
		if over > 0 && !drop[i] {
			drop[i] = true
			over--
		}
	}
	kept := make([]v1alpha1.RefusedLock, 0, v1alpha1.MaxRefusedLocks)
	for i, h := range have {
		if !drop[i] {
			kept = append(kept, h)
		}
	}
	return kept
}

func (s *Syncer) warn(src *v1alpha1.StyrminSource, reason, format string, args ...any) {
	if s.opts.Recorder != nil {
		s.opts.Recorder.Eventf(src, nil, corev1.EventTypeWarning, reason, "Sync", format, args...)
	}
}
