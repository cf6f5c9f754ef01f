package operation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/robfig/cron/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/operator/task"
	"github.com/styrmin/styrmin/resolver"
)

// Labels and annotations of scheduled backups.
const (
	// LabelSchedule on a StyrminBackup names the environment whose
	// schedule made it.
	LabelSchedule = v1alpha1.Group + "/schedule"
	// AnnotationScheduledFor is the schedule's time the backup is for
	// (RFC 3339).
	AnnotationScheduledFor = v1alpha1.Group + "/scheduled-for"
	// AnnotationSupersededBy on a scheduled backup that had not ended
	// when its schedule made the next one names that next one: the
	// backup's parts whose tasks have not started end Failed, superseded
	// (the backup's controller ends them, as it writes the parts).
	AnnotationSupersededBy = v1alpha1.Group + "/superseded-by"
)

// DefaultScheduleInterval is how often the scheduler looks at the
// schedules.
const DefaultScheduleInterval = 30 * time.Second

// CatchUpWindow is how long after a schedule's time a scheduler that
// started since (and so never saw that time) still makes its backup when
// there is none (at least two of its intervals), when the agent's
// StyrminSource records nothing of the schedule (an agent from before
// the record, or none to write it on): enough for an agent restarted or
// replaced over the time, while a backup of that time deleted by hand
// hours ago is not made again by the next agent. With the record, a time
// missed is made however late, and one made never again.
const CatchUpWindow = time.Hour

// Retention's bounds besides an environment's backups.keep.
const (
	// KeepFailed is how many of a schedule's failed backups newer than
	// its keep-th success are kept (the newest): enough to see why they
	// fail, and no pile when none succeeds (a bad Secret).
	KeepFailed = 3
	// KeepBackupsFirst is how many backups that upgrades took first are
	// kept per deployment (the newest): they belong to no schedule, and
	// every upgrade that backs up first makes one.
	KeepBackupsFirst = 3
)

// ReasonScheduleSuperseded is the reason of the Reconciling condition of
// a scheduled backup that had not ended when its schedule's next time
// came: the next backup is made all the same, and this one's parts whose
// tasks have not started end Failed, superseded by it.
const ReasonScheduleSuperseded = "ScheduleSuperseded"

// Scheduler makes the StyrminBackups that environments' schedules ask
// for (backups: {schedule, keep} in git) and deletes the oldest beyond
// keep. Each time of a schedule is made at most once, and never after a
// newer one: a backup deleted (by hand or retention) is not made again,
// which would give a new backup the deleted one's ID and artefact path.
// Where each schedule stands is recorded on the agent's StyrminSource
// (status.scheduledBackups), so a time that passed while no agent ran is
// made up once (the newest) when the next starts, however late; without
// that record, only within CatchUpWindow. It runs on the elected replica
// only.
type Scheduler struct {
	opts     Options
	interval time.Duration
	log      logr.Logger

	mu sync.Mutex
	// started is the scheduler's first look: the times after it it saw
	// pass, and seen says whether it made them.
	started time.Time
	// seen is, per environment, the newest time of its schedule this
	// scheduler made or saw a backup for, or when it first saw the
	// schedule without a backup (no backfill of a new schedule): only a
	// later time is made. Kept here and recorded on the StyrminSource, not
	// worked out from the backups left, which a deletion changes.
	seen map[string]time.Time
	// recorded is what the StyrminSource records (environment to time):
	// read at the first look that can (loaded), and as last written since.
	recorded map[string]time.Time
	loaded   bool
}

var _ manager.LeaderElectionRunnable = (*Scheduler)(nil)

// NewScheduler returns the scheduler; interval 0 means
// DefaultScheduleInterval.
func NewScheduler(opts Options, interval time.Duration, log logr.Logger) (*Scheduler, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	if interval <= 0 {
		interval = DefaultScheduleInterval
	}
	return &Scheduler{opts: opts, interval: interval, log: log, seen: map[string]time.Time{}, recorded: map[string]time.Time{}}, nil
}

// NeedLeaderElection is true: two replicas never make one backup twice.
func (s *Scheduler) NeedLeaderElection() bool { return true }

// Start ticks until ctx ends. An error that every look meets alike (a
// settings file in error, a name held by another backup) is logged when
// it starts, changes and ends, not at every look.
func (s *Scheduler) Start(ctx context.Context) error {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	var errs repeatedError
	for {
		err := s.Tick(ctx)
		if ctx.Err() != nil {
			return nil
		}
		switch first, ended := errs.observe(err); {
		case first:
			s.log.Error(err, "backup schedules (logged again when it changes, and when it is over)")
		case err != nil:
			s.log.V(1).Info("backup schedules: the error logged before, again", "error", err.Error())
		case ended:
			s.log.Info("backup schedules: the error logged before is over")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Tick makes the backups that are due and applies retention, for every
// environment of the agent's cluster with a schedule or a keep, and keeps
// the backups upgrades took first bounded. An environment whose settings
// cannot be read is left as it is, and named in the error; one whose
// location an environment of its name in another cluster shares
// (LocationErr) gets no new backup, only retention, and is named too; the
// others go on.
func (s *Scheduler) Tick(ctx context.Context) error {
	// The scheduler ran from its first tick, whether or not git could be
	// read then: a time that passed while the settings could not be read
	// (a clone behind, a git host down for the night) is not one missed
	// while no agent ran, and is made once they can be.
	now := s.opts.now()
	s.mu.Lock()
	if s.started.IsZero() {
		s.started = now
	}
	s.mu.Unlock()
	all, err := readSettings(ctx, s.opts.Settings)
	if err != nil {
		return err
	}
	if err := s.loadRecord(ctx, now); err != nil {
		return err
	}
	// A backup an environment in git is cloned from stays: the clone's
	// deployments restore it when they are created, which may be later
	// than the next retention. (One whose settings cannot be read is
	// waited for by the deletion itself: cloneWait.)
	cloned := map[string]string{}
	for _, e := range all {
		if cf := e.ClonedFrom; cf != nil && cf.Backup != "" && cf.Cluster == s.opts.Cluster {
			cloned[cf.Environment+"/"+cf.Backup] = e.Cluster + "/" + e.Environment
		}
	}
	var errs []error
	// The environments whose settings cannot be read ("": the cluster's
	// file, each of its environments): no retention touches their backups.
	unreadable := map[string]bool{}
	for _, e := range all {
		schedule := e.Schedule
		switch {
		case e.Cluster != s.opts.Cluster:
			continue
		case e.Err != nil:
			unreadable[e.Environment] = true
			errs = append(errs, fmt.Errorf("environment %s/%s: no scheduled backup or retention until git's backup settings read: %w", e.Cluster, e.Environment, e.Err))
			continue
		case e.Schedule == "":
			// A schedule removed starts afresh when it comes back (no
			// backfill of a new schedule).
			s.forget(e.Environment)
			if e.Keep == 0 {
				continue
			}
		case e.LocationErr != nil:
			// No new backup (the start would refuse it), but where the
			// schedule stands is kept, and retention goes on: with none
			// made it deletes nothing it would not have anyway.
			schedule = ""
			errs = append(errs, fmt.Errorf("environment %s/%s: no scheduled backup until its backupLocation is its own: %w", e.Cluster, e.Environment, e.LocationErr))
		}
		if err := s.environment(ctx, e.Environment, schedule, e.Keep, now, cloned); err != nil {
			errs = append(errs, fmt.Errorf("environment %s/%s: %w", e.Cluster, e.Environment, err))
		}
	}
	if err := s.retainBackupsFirst(ctx, cloned, unreadable); err != nil {
		errs = append(errs, err)
	}
	if err := s.record(ctx, all, unreadable, now); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// loadRecord reads where the schedules stand from the StyrminSource, once
// (later, this scheduler is its only writer: leader election). A time in
// the future is not taken (it would stop the schedule until then). No
// StyrminSource yet (the syncer makes it) records nothing.
func (s *Scheduler) loadRecord(ctx context.Context, now time.Time) error {
	if s.loaded || s.opts.Source.Name == "" {
		return nil
	}
	var src v1alpha1.StyrminSource
	if err := s.opts.APIReader.Get(ctx, s.opts.Source, &src); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading where the backup schedules stand on StyrminSource %s: %w", s.opts.Source, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range src.Status.ScheduledBackups {
		if !r.Time.After(now) {
			s.recorded[r.Environment] = r.Time.Time
		}
	}
	s.loaded = true
	return nil
}

// forget drops what the scheduler saw of env's schedule (removed); the
// look's record drops it from the StyrminSource.
func (s *Scheduler) forget(env string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.seen, env)
}

// record writes where each schedule of the agent's cluster stands on the
// StyrminSource when it records otherwise (a time made, a schedule first
// seen or removed; a StyrminSource made again, or its field dropped by an
// older agent's write): compared at each look with the copy the cache
// holds, it is written once per change, not per look. Environments whose
// settings cannot be read, or whose look failed before it saw where their
// schedule stands (a List refused), keep what was recorded. Times are
// kept to the second, as the status holds them. A later time recorded
// since (by the next leader, while this one was paused past its lease)
// is kept (notBehind), and the write is made on the resourceVersion of the
// copy it was compared with: one that conflicts reads the record again
// and decides again (writeRecord).
func (s *Scheduler) record(ctx context.Context, all []resolver.EnvironmentBackups, unreadable map[string]bool, now time.Time) error {
	if s.opts.Source.Name == "" || unreadable[""] {
		return nil
	}
	s.mu.Lock()
	want := map[string]time.Time{}
	for _, e := range all {
		if e.Cluster != s.opts.Cluster {
			continue
		}
		seen := s.seen[e.Environment]
		recorded, ok := s.recorded[e.Environment]
		switch {
		case !unreadable[e.Environment] && e.Schedule != "" && !seen.IsZero():
			want[e.Environment] = seen.UTC().Truncate(time.Second)
		case ok && (unreadable[e.Environment] || e.Schedule != ""):
			want[e.Environment] = recorded
		}
	}
	s.mu.Unlock()
	var src v1alpha1.StyrminSource
	if err := s.opts.Client.Get(ctx, s.opts.Source, &src); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("reading where the backup schedules stand on StyrminSource %s: %w", s.opts.Source, err)
	}
	written, err := s.writeRecord(ctx, &src, want)
	if err != nil || written == nil {
		return err
	}
	// A time after now the record keeps is not taken, as loadRecord
	// takes none: it would stop the schedule until then.
	for env, t := range written {
		if t.After(now) {
			written[env] = want[env]
		}
	}
	s.mu.Lock()
	s.recorded, s.loaded = written, true
	s.mu.Unlock()
	return nil
}

// recordAttempts bounds how often record reads the StyrminSource again
// after a conflict in one look; the next look goes on.
const recordAttempts = 3

// writeRecord writes want (kept notBehind the record) on src's
// resourceVersion, unless src records it already; on a conflict it reads
// src from the API server and decides again. It returns what the record
// holds then; nil with no error when the StyrminSource is gone.
func (s *Scheduler) writeRecord(ctx context.Context, src *v1alpha1.StyrminSource, want map[string]time.Time) (map[string]time.Time, error) {
	for attempt := 1; ; attempt++ {
		want = notBehind(want, src.Status.ScheduledBackups)
		have := map[string]time.Time{}
		for _, r := range src.Status.ScheduledBackups {
			have[r.Environment] = r.Time.Time
		}
		if maps.EqualFunc(want, have, time.Time.Equal) {
			return want, nil
		}
		list := make([]v1alpha1.ScheduledBackup, 0, len(want))
		for _, env := range slices.Sorted(maps.Keys(want)) {
			list = append(list, v1alpha1.ScheduledBackup{Environment: env, Time: metav1.NewTime(want[env])})
		}
		patch, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": src.ResourceVersion},
			"status":   map[string]any{"scheduledBackups": list},
		})
		if err != nil {
			return nil, err
		}
		err = s.opts.Client.Status().Patch(ctx, src, client.RawPatch(types.MergePatchType, patch))
		switch {
		case err == nil:
			return want, nil
		case apierrors.IsNotFound(err):
			return nil, nil
		case !apierrors.IsConflict(err) || attempt == recordAttempts:
			return nil, fmt.Errorf("recording where the backup schedules stand on StyrminSource %s: %w", s.opts.Source, err)
		}
		if err := s.opts.APIReader.Get(ctx, s.opts.Source, src); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("reading where the backup schedules stand on StyrminSource %s: %w", s.opts.Source, err)
		}
	}
}

// notBehind is want with each environment's time moved to the one
// recorded when that is later: a schedule's time only moves forward, and
// a later one recorded was made by another scheduler (the next leader)
// this one did not see. Writing want over it would name as missed a time
// made, made again by the next agent to start after its backup was
// deleted. (The clock of a scheduler paused past its lease is behind the
// next leader's: a time after its now is kept too.)
func notBehind(want map[string]time.Time, recorded []v1alpha1.ScheduledBackup) map[string]time.Time {
	out := maps.Clone(want)
	for _, r := range recorded {
		if w, ok := out[r.Environment]; ok && r.Time.After(w) {
			out[r.Environment] = r.Time.Time
		}
	}
	return out
}

func (s *Scheduler) environment(ctx context.Context, env, schedule string, keep int, now time.Time, cloned map[string]string) error {
	var list v1alpha1.StyrminBackupList
	if err := s.opts.Client.List(ctx, &list, client.InNamespace(s.opts.Namespace), client.MatchingLabels{LabelSchedule: env, v1alpha1.LabelCluster: s.opts.Cluster}); err != nil {
		return err
	}
	backups := list.Items
	slices.SortFunc(backups, func(a, b v1alpha1.StyrminBackup) int { return scheduledFor(&b).Compare(scheduledFor(&a)) })
	if schedule != "" {
		if err := s.due(ctx, env, schedule, backups, now); err != nil {
			return err
		}
	}
	if keep > 0 {
		return s.retain(ctx, env, backups, keep, cloned)
	}
	return nil
}

// due makes the backup of the schedule's newest time at or before now,
// if it is newer than every time made or seen made (lastSeen; a time
// that passed before the scheduler started only within CatchUpWindow),
// whether or not the schedule's previous backup has ended: one part of
// it can wait for as long as its deployment is held (a failed restore of
// that deployment, a failed wave before its changes), and the schedule
// would make nothing for the environment's other deployments meanwhile.
// A backup of the schedule that has not ended is superseded by the newest
// instead (supersede), so at most one waits at a time and no waiting ones
// pile up. A time whose backup's name another backup holds is not made,
// and the error names that backup (makeScheduled).
func (s *Scheduler) due(ctx context.Context, env, schedule string, backups []v1alpha1.StyrminBackup, now time.Time) error {
	// The lock checked it; a lockfile written by hand was not: the same
	// check first (the cron parser panics on some time-zone prefixes).
	if err := resolver.CheckBackupSchedule(schedule); err != nil {
		return fmt.Errorf("backups.schedule %q: %w", schedule, err)
	}
	sched, err := cron.ParseStandard(schedule)
	if err != nil {
		return fmt.Errorf("backups.schedule %q: %w", schedule, err)
	}
	last, started, recorded := s.lastSeen(env, backups, now)
	slot := time.Time{}
	for n, i := sched.Next(last), 0; !n.IsZero() && !n.After(now) && i < 100000; n, i = sched.Next(n), i+1 {
		slot = n
	}
	// A time that passed before this scheduler looked, with no backup and
	// nothing recorded, was missed while no agent ran or its backup was
	// deleted since: made up only soon after it, when the former is
	// likely. A time after the one recorded was missed: made however late.
	if !slot.IsZero() && !recorded && !slot.After(started) && now.Sub(slot) > max(CatchUpWindow, 2*s.interval) {
		slot = time.Time{}
	}
	var errs []error
	newest, older := "", backups
	if !slot.IsZero() {
		made, err := s.makeScheduled(ctx, env, slot)
		if made == "" && err == nil {
			// Another scheduler made a later time (madeSince): the list
			// read before it is behind, and supersedes nothing.
			return nil
		}
		var taken *nameTakenError
		switch {
		case errors.As(err, &taken):
			// Not made: said at each look until the name is free (the time
			// is made then) or the schedule's next time comes.
			errs = append(errs, err)
		case err != nil:
			return err
		default:
			newest = made
		}
	}
	if newest == "" && len(backups) > 0 {
		newest, older = backups[0].Name, backups[1:]
	}
	// At every look, not only when the newest is made: a write that did
	// not go through (a conflict with the backup's controller) is made at
	// the next.
	for i := range older {
		if p := &older[i]; p.Name != newest && !p.Status.Phase.Terminal() && p.DeletionTimestamp.IsZero() {
			errs = append(errs, s.supersede(ctx, p, newest))
		}
	}
	return errors.Join(errs...)
}

// scheduledNameLayout is the time in the name of a scheduled backup,
// <env>-YYYYMMDD-HHMM (UTC).
const scheduledNameLayout = "20060102-1504"

// scheduledName is the name of env's scheduled backup for slot.
func scheduledName(env string, slot time.Time) string {
	return env + "-" + slot.UTC().Format(scheduledNameLayout)
}

// scheduledNameOf splits a name of the form of a scheduled backup's into
// the environment and time it would be the backup of; ok is false for a
// name of another form.
func scheduledNameOf(name string) (env string, slot time.Time, ok bool) {
	i := len(name) - len(scheduledNameLayout)
	if i < 2 || name[i-1] != '-' {
		return "", time.Time{}, false
	}
	slot, err := time.Parse(scheduledNameLayout, name[i:])
	if err != nil {
		return "", time.Time{}, false
	}
	return name[:i-1], slot, true
}

// makeScheduled creates the backup of env's schedule for slot and takes
// the time as made. A backup already at its name counts as made only when
// it is that backup (an earlier look made it, and the cache did not show
// it): any other (one made by hand under that name) is no backup of the
// schedule's, and the time is not made (a nameTakenError). When the
// StyrminSource records a time of env at or after slot (madeSince), it
// makes nothing and returns "".
func (s *Scheduler) makeScheduled(ctx context.Context, env string, slot time.Time) (string, error) {
	later, err := s.madeSince(ctx, env, slot)
	if err != nil {
		return "", err
	}
	if !later.IsZero() {
		s.mu.Lock()
		if later.After(s.seen[env]) {
			s.seen[env] = later
		}
		s.mu.Unlock()
		s.log.Info("a scheduled backup not made: another scheduler recorded a later time of the schedule (this one was paused past its lease)",
			"environment", env, "for", slot.UTC().Format(time.RFC3339), "recorded", later.UTC().Format(time.RFC3339))
		return "", nil
	}
	b := &v1alpha1.StyrminBackup{
		ObjectMeta: metav1.ObjectMeta{
			Name:        scheduledName(env, slot),
			Namespace:   s.opts.Namespace,
			Labels:      map[string]string{LabelSchedule: env, v1alpha1.LabelCluster: s.opts.Cluster, v1alpha1.LabelEnvironment: env},
			Annotations: map[string]string{AnnotationScheduledFor: slot.UTC().Format(time.RFC3339)},
		},
		Spec: v1alpha1.StyrminBackupSpec{Cluster: s.opts.Cluster, Environment: env},
	}
	err = s.opts.Client.Create(ctx, b)
	switch {
	case apierrors.IsAlreadyExists(err):
		if err := s.heldByItself(ctx, b.Name, env, slot); err != nil {
			return "", err
		}
	case err != nil:
		return "", fmt.Errorf("creating scheduled backup %s: %w", b.Name, err)
	}
	s.mu.Lock()
	s.seen[env] = slot
	s.mu.Unlock()
	s.log.Info("scheduled backup", "environment", env, "backup", b.Name, "for", slot.UTC().Format(time.RFC3339))
	return b.Name, nil
}

// madeSince is the time of env's schedule the StyrminSource records, read
// from the API server, when it is slot or later and not after the clock
// now (zero otherwise, or with no StyrminSource): the next leader made
// it. A leader paused past its lease between deciding slot and making it
// woke after the next leader had made slot and later times, and made slot
// again: an extra backup of an older time, under the ID and artefact path
// of one retention had deleted since. One read per backup made.
func (s *Scheduler) madeSince(ctx context.Context, env string, slot time.Time) (time.Time, error) {
	if s.opts.Source.Name == "" {
		return time.Time{}, nil
	}
	var src v1alpha1.StyrminSource
	if err := s.opts.APIReader.Get(ctx, s.opts.Source, &src); err != nil {
		if apierrors.IsNotFound(err) {
			return time.Time{}, nil
		}
		return time.Time{}, fmt.Errorf("reading where the backup schedules stand on StyrminSource %s before making %s's backup for %s: %w",
			s.opts.Source, env, slot.UTC().Format(time.RFC3339), err)
	}
	now := s.opts.now()
	for _, r := range src.Status.ScheduledBackups {
		if r.Environment == env && !r.Time.Time.Before(slot) && !r.Time.After(now) {
			return r.Time.Time, nil
		}
	}
	return time.Time{}, nil
}

// heldByItself returns nil when the backup at name, read from the API
// server, is env's schedule's backup for slot (its schedule label, cluster
// and scheduled-for time), and a nameTakenError naming it otherwise.
func (s *Scheduler) heldByItself(ctx context.Context, name, env string, slot time.Time) error {
	var have v1alpha1.StyrminBackup
	if err := s.opts.APIReader.Get(ctx, client.ObjectKey{Namespace: s.opts.Namespace, Name: name}, &have); err != nil {
		// Gone since: the next look makes it.
		return fmt.Errorf("reading backup %s, which holds the name of the schedule's backup for %s: %w", name, slot.UTC().Format(time.RFC3339), err)
	}
	at, err := time.Parse(time.RFC3339, have.Annotations[AnnotationScheduledFor])
	if have.Labels[LabelSchedule] == env && have.Labels[v1alpha1.LabelCluster] == s.opts.Cluster && err == nil && at.Equal(slot) {
		return nil
	}
	return &nameTakenError{cluster: s.opts.Cluster, env: env, slot: slot, holder: &have}
}

// nameTakenError is a time of a schedule whose backup's name another
// backup holds: the time is not made while it does.
type nameTakenError struct {
	cluster, env string
	slot         time.Time
	holder       *v1alpha1.StyrminBackup
}

func (e *nameTakenError) Error() string {
	h := e.holder
	return fmt.Sprintf("the backup of %s/%s's schedule for %s is not made: StyrminBackup %s/%s holds its name and is no backup of that schedule "+
		"(environment %s, %s=%q, %s=%q; made by hand under that name?): delete it for the time to be made, or the schedule makes its next time only",
		e.cluster, e.env, e.slot.UTC().Format(time.RFC3339), h.Namespace, h.Name, orNone(h.Spec.Environment),
		LabelSchedule, h.Labels[LabelSchedule], AnnotationScheduledFor, h.Annotations[AnnotationScheduledFor])
}

// lastSeen is the newest time of env's schedule made or seen made (the
// newest of backups, sorted newest first, counts, and what the
// StyrminSource records), kept; with none, now, the first look at the
// schedule. It returns when the scheduler started too, and whether the
// StyrminSource recorded the schedule.
func (s *Scheduler) lastSeen(env string, backups []v1alpha1.StyrminBackup, now time.Time) (last, started time.Time, recorded bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	last = s.seen[env]
	r, recorded := s.recorded[env]
	if r.After(last) {
		last = r
	}
	if len(backups) > 0 && scheduledFor(&backups[0]).After(last) {
		last = scheduledFor(&backups[0])
	}
	if last.IsZero() {
		last = now
	}
	s.seen[env] = last
	return last, s.started, recorded
}

// supersede marks p, a scheduled backup that has not ended, superseded by
// the schedule's newer backup by (AnnotationSupersededBy), and says so in
// its Reconciling condition, each when it does not say so already. Its
// parts are ended by its controller, which writes them (a part ended here
// could be written back Pending from the controller's copy, and its task
// made again). The condition is written on p's resourceVersion: the
// controller writes the status too, and this must not undo a write the
// scheduler has not seen (it says so again at its next look).
func (s *Scheduler) supersede(ctx context.Context, p *v1alpha1.StyrminBackup, by string) error {
	if p.Annotations[AnnotationSupersededBy] != by {
		base := p.DeepCopy()
		metav1.SetMetaDataAnnotation(&p.ObjectMeta, AnnotationSupersededBy, by)
		if err := s.opts.Client.Patch(ctx, p, client.MergeFrom(base)); err != nil {
			return client.IgnoreNotFound(err)
		}
		s.log.Info("a scheduled backup had not ended: superseded by the schedule's next", "backup", p.Name, "by", by)
	}
	base := p.DeepCopy()
	msg := fmt.Sprintf("the schedule made its next backup %s while this one had not ended (%s): its parts whose tasks had not started end failed, superseded by it; those that run are left to finish",
		by, orNone(string(p.Status.Phase)))
	if !apimeta.SetStatusCondition(&p.Status.Conditions, metav1.Condition{Type: v1alpha1.ConditionReconciling, Status: metav1.ConditionTrue,
		Reason: ReasonScheduleSuperseded, Message: msg, ObservedGeneration: p.Generation}) {
		return nil
	}
	err := s.opts.Client.Status().Patch(ctx, p, client.MergeFromWithOptions(base, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// retain deletes the scheduled backups of env beyond the keep newest that
// succeeded, and the failed ones older than those or beyond the
// KeepFailed newest, never one that runs, that a restore in progress
// reads or that an environment is cloned from (cloned: "env/backup" to
// the clone).
func (s *Scheduler) retain(ctx context.Context, env string, backups []v1alpha1.StyrminBackup, keep int, cloned map[string]string) error {
	inUse, err := restoring(ctx, s.opts.APIReader, s.opts.Namespace, true)
	if err != nil {
		return err
	}
	kept, failed := 0, 0
	for i := range backups {
		b := &backups[i]
		if !b.Status.Phase.Terminal() || inUse[b.Name] != "" || !b.DeletionTimestamp.IsZero() {
			continue
		}
		if b.Status.Phase == v1alpha1.OperationSucceeded {
			if kept++; kept <= keep {
				continue
			}
		} else if failed++; kept < keep && failed <= KeepFailed {
			continue
		}
		if clone := cloned[env+"/"+b.Name]; clone != "" {
			s.log.V(1).Info("kept a backup beyond keep: an environment is cloned from it", "backup", b.Name, "keep", keep, "clone", clone)
			continue
		}
		if err := s.opts.Client.Delete(ctx, b); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting backup %s beyond keep %d: %w", b.Name, keep, err)
		}
		s.log.Info("deleted a backup beyond keep", "backup", b.Name, "keep", keep)
	}
	return nil
}

// retainBackupsFirst deletes the backups upgrades took first (labelled
// with their task) of each deployment of the agent's cluster beyond those
// it keeps: the KeepBackupsFirst newest, and for each of the
// KeepBackupsFirst newest sequences they backed up, the oldest backup of
// it. A failed upgrade is run again by its retry or fix, each backing up
// first the same sequence, by then half migrated: only the first holds the
// data from before the upgrade ran. Never deleted: one that a restore reads
// or may retry from, that an environment is cloned from, or of an
// environment whose settings cannot be read (unreadable, "": all of them).
func (s *Scheduler) retainBackupsFirst(ctx context.Context, cloned map[string]string, unreadable map[string]bool) error {
	if unreadable[""] {
		return nil
	}
	var list v1alpha1.StyrminBackupList
	if err := s.opts.Client.List(ctx, &list, client.InNamespace(s.opts.Namespace), client.MatchingLabels{v1alpha1.LabelCluster: s.opts.Cluster},
		client.HasLabels{task.LabelTask}); err != nil {
		return fmt.Errorf("listing the backups upgrades took first: %w", err)
	}
	byDeployment := map[string][]*v1alpha1.StyrminBackup{}
	for i := range list.Items {
		b := &list.Items[i]
		if len(b.Spec.Deployments) != 1 || unreadable[b.Spec.Environment] {
			continue
		}
		k := b.Spec.Environment + "/" + b.Spec.Deployments[0]
		byDeployment[k] = append(byDeployment[k], b)
	}
	var inUse map[string]string
	for _, k := range sortedKeys(byDeployment) {
		backups := byDeployment[k]
		if len(backups) <= KeepBackupsFirst {
			continue
		}
		if inUse == nil {
			var err error
			if inUse, err = restoring(ctx, s.opts.APIReader, s.opts.Namespace, true); err != nil {
				return err
			}
		}
		// Newest first: by when it was made (the sequence its upgrade
		// went to is in no field to sort by).
		slices.SortFunc(backups, func(a, b *v1alpha1.StyrminBackup) int {
			if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
				return c
			}
			return strings.Compare(b.Name, a.Name)
		})
		firsts := firstOfSequences(backups)
		kept := 0
		for _, b := range backups {
			if !b.Status.Phase.Terminal() || inUse[b.Name] != "" || !b.DeletionTimestamp.IsZero() {
				continue
			}
			if kept++; kept <= KeepBackupsFirst || firsts[b.Name] {
				continue
			}
			if clone := cloned[b.Spec.Environment+"/"+b.Name]; clone != "" {
				s.log.V(1).Info("kept a backup taken before an upgrade beyond the newest: an environment is cloned from it", "backup", b.Name, "clone", clone)
				continue
			}
			if err := s.opts.Client.Delete(ctx, b); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting backup %s, taken before an upgrade of %s, beyond the newest %d: %w", b.Name, k, KeepBackupsFirst, err)
			}
			s.log.Info("deleted a backup taken before an upgrade beyond the newest", "backup", b.Name, "deployment", k, "keep", KeepBackupsFirst)
		}
	}
	return nil
}

// firstOfSequences names, of a deployment's backups taken before upgrades
// (newest first), the oldest of each of the KeepBackupsFirst newest
// sequences they backed up (the sequence their part records).
func firstOfSequences(backups []*v1alpha1.StyrminBackup) map[string]bool {
	oldest := map[int64]string{}
	for _, b := range backups {
		if len(b.Status.Deployments) != 1 || b.Status.Deployments[0].Sequence == 0 {
			continue
		}
		oldest[b.Status.Deployments[0].Sequence] = b.Name
	}
	seqs := slices.Sorted(maps.Keys(oldest))
	out := map[string]bool{}
	for _, seq := range seqs[max(0, len(seqs)-KeepBackupsFirst):] {
		out[oldest[seq]] = true
	}
	return out
}

// restoring maps each backup that restores read to the name of one of
// them (the first by name), as the API server lists them in namespace: a
// restore made a moment ago may not be in the cache, and a backup it
// reads must not lose its artefacts. A restore
// reads its backup from its creation until it ends; with failedToo, a
// failed one that may be retried too (retention keeps its backup; a
// deletion asked for does not wait for it, and its retry is then refused).
func restoring(ctx context.Context, api client.Reader, namespace string, failedToo bool) (map[string]string, error) {
	var list v1alpha1.StyrminRestoreList
	if err := api.List(ctx, &list, client.InNamespace(namespace)); err != nil {
		return nil, fmt.Errorf("listing the restores: %w", err)
	}
	out := map[string]string{}
	for _, r := range list.Items {
		// A failed restore with no deployment was refused at its start: it
		// cannot be retried.
		retriable := r.Status.Phase == v1alpha1.OperationFailed && len(r.Status.Deployments) > 0
		// Asked to retry and not yet: it is about to read the backup, or
		// to be refused (then the deletion goes on).
		retrying := retriable && r.Spec.Retry != r.Status.ObservedRetry
		reads := !r.Status.Phase.Terminal() || retrying || (failedToo && retriable)
		if first, seen := out[r.Spec.Backup]; reads && r.DeletionTimestamp.IsZero() && (!seen || r.Name < first) {
			out[r.Spec.Backup] = r.Name
		}
	}
	return out, nil
}

// scheduledFor is the schedule time a scheduled backup is for (its
// creation time when the annotation is missing).
func scheduledFor(b *v1alpha1.StyrminBackup) time.Time {
	if t, err := time.Parse(time.RFC3339, b.Annotations[AnnotationScheduledFor]); err == nil {
		return t
	}
	return b.CreationTimestamp.Time
}

// repeatedError follows the errors of a loop's rounds, for the loop to log
// an error once rather than at every round. The zero value has seen none.
type repeatedError struct{ last string }

// observe records a round's error (nil: none): first is true when err is
// not the one of the round before, ended at the first round without an
// error after one with.
func (r *repeatedError) observe(err error) (first, ended bool) {
	if err == nil {
		ended, r.last = r.last != "", ""
		return false, ended
	}
	msg := err.Error()
	first, r.last = msg != r.last, msg
	return first, false
}
