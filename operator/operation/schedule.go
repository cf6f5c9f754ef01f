package operation

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/robfig/cron/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/styrmin/styrmin/operator/api/v1alpha1"
)

// Labels and annotations of scheduled backups.
const (
	// LabelSchedule on a StyrminBackup names the environment whose
	// schedule made it.
	LabelSchedule = v1alpha1.Group + "/schedule"
	// AnnotationScheduledFor is the schedule's time the backup is for
	// (RFC 3339).
	AnnotationScheduledFor = v1alpha1.Group + "/scheduled-for"
)

// DefaultScheduleInterval is how often the scheduler looks at the
// schedules.
const DefaultScheduleInterval = 30 * time.Second

// Scheduler makes the StyrminBackups that environments' schedules ask
// for (backups: {schedule, keep} in git) and deletes the oldest beyond
// keep. A schedule's time that passed while no agent ran is made up once
// (the newest one), not once per missed time. It runs on the elected
// replica only.
type Scheduler struct {
	opts     Options
	interval time.Duration
	log      logr.Logger

	mu sync.Mutex
	// since is when each environment's schedule was first seen without a
	// scheduled backup: its first backup is the schedule's first time
	// after that (no backfill of a new schedule).
	since map[string]time.Time
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
	return &Scheduler{opts: opts, interval: interval, log: log, since: map[string]time.Time{}}, nil
}

// NeedLeaderElection is true: two replicas never make one backup twice.
func (s *Scheduler) NeedLeaderElection() bool { return true }

// Start ticks until ctx ends.
func (s *Scheduler) Start(ctx context.Context) error {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		if err := s.Tick(ctx); err != nil && ctx.Err() == nil {
			s.log.Error(err, "backup schedules")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Tick makes the backups that are due and applies retention, for every
// environment of the agent's cluster with a schedule or a keep.
func (s *Scheduler) Tick(ctx context.Context) error {
	all, err := s.opts.Settings.BackupSettings(ctx)
	if err != nil {
		return err
	}
	now := s.opts.now()
	// A backup an environment in git is cloned from stays: the clone's
	// deployments restore it when they are created, which may be later
	// than the next retention.
	cloned := map[string]string{}
	for _, e := range all {
		if cf := e.ClonedFrom; cf != nil && cf.Backup != "" && cf.Cluster == s.opts.Cluster {
			cloned[cf.Environment+"/"+cf.Backup] = e.Cluster + "/" + e.Environment
		}
	}
	var errs []error
	for _, e := range all {
		if e.Cluster != s.opts.Cluster || (e.Schedule == "" && e.Keep == 0) {
			continue
		}
		if err := s.environment(ctx, e.Environment, e.Schedule, e.Keep, now, cloned); err != nil {
			errs = append(errs, fmt.Errorf("environment %s/%s: %w", e.Cluster, e.Environment, err))
		}
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
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
// if none was made for it.
func (s *Scheduler) due(ctx context.Context, env, schedule string, backups []v1alpha1.StyrminBackup, now time.Time) error {
	sched, err := cron.ParseStandard(schedule)
	if err != nil {
		return fmt.Errorf("backups.schedule %q: %w", schedule, err)
	}
	var last time.Time
	if len(backups) > 0 {
		last = scheduledFor(&backups[0])
	} else {
		s.mu.Lock()
		if _, ok := s.since[env]; !ok {
			s.since[env] = now
		}
		last = s.since[env]
		s.mu.Unlock()
	}
	slot := time.Time{}
	for n, i := sched.Next(last), 0; !n.IsZero() && !n.After(now) && i < 100000; n, i = sched.Next(n), i+1 {
		slot = n
	}
	if slot.IsZero() {
		return nil
	}
	b := &v1alpha1.StyrminBackup{
		ObjectMeta: metav1.ObjectMeta{
			Name:        env + "-" + slot.UTC().Format("20060102-1504"),
			Namespace:   s.opts.Namespace,
			Labels:      map[string]string{LabelSchedule: env, v1alpha1.LabelCluster: s.opts.Cluster, v1alpha1.LabelEnvironment: env},
			Annotations: map[string]string{AnnotationScheduledFor: slot.UTC().Format(time.RFC3339)},
		},
		Spec: v1alpha1.StyrminBackupSpec{Cluster: s.opts.Cluster, Environment: env},
	}
	if err := s.opts.Client.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating scheduled backup %s: %w", b.Name, err)
	}
	s.log.Info("scheduled backup", "environment", env, "backup", b.Name, "for", slot.UTC().Format(time.RFC3339))
	return nil
}

// retain deletes the scheduled backups of env beyond the keep newest that
// succeeded (and failed ones older than those), never one that runs, that
// a restore in progress reads or that an environment is cloned from
// (cloned: "env/backup" to the clone).
func (s *Scheduler) retain(ctx context.Context, env string, backups []v1alpha1.StyrminBackup, keep int, cloned map[string]string) error {
	inUse, err := restoring(ctx, s.opts.APIReader, s.opts.Namespace, true)
	if err != nil {
		return err
	}
	kept := 0
	for i := range backups {
		b := &backups[i]
		if !b.Status.Phase.Terminal() || inUse[b.Name] != "" || !b.DeletionTimestamp.IsZero() {
			continue
		}
		if b.Status.Phase == v1alpha1.OperationSucceeded {
			if kept++; kept <= keep {
				continue
			}
		} else if kept < keep {
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
