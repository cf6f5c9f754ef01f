// Package source owns the way from git to the cluster's StyrminTasks:
// the syncer fetches the desired-state repository, walks every lock
// commit of its cluster since the last one synced and creates one task
// per new (deployment, sequence); the locker (lock mode, for teams
// without CI) locks each configuration head and pushes the lock commits.
// Both poll on an interval and run at once on a trigger (a webhook push),
// and both run only on the elected agent replica. A malformed lock
// trailer is skipped with an event, and a branch rewritten under the
// syncer is reported without a sequence ever being used twice (history.go).
// A task the API server refuses holds back only its own deployment: the
// other tasks are made, and the sync fails naming it and keeps its
// position, so the refused task is tried again at the next sync. What
// each lock of the lock mode held back is written on the StyrminSource's
// Locked condition and posted on the configuration commit (lockstatus.go).
package source
