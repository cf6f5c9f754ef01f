// Package source owns the way from git to the cluster's StyrminTasks:
// the syncer fetches the desired-state repository, walks every lock
// commit of its cluster since the last one synced and creates one task
// per new (deployment, sequence); the locker (lock mode, for teams
// without CI) locks each configuration head and pushes the lock commits.
// Both poll on an interval and run at once on a trigger (a webhook push),
// and both run only on the elected agent replica. A malformed lock
// trailer is skipped with an event, and a branch rewritten under the
// syncer is reported without a sequence ever being used twice (history.go).
package source
