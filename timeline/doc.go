// Package timeline reads the instance timeline of a deployment from git:
// every lock commit that changed its lockfile, oldest first, with the
// sequence it locked, who made the commit and when, the configuration
// commit (and pull request) it locked, and the workflow the change selects
// against the instance before it. Git keeps every instance, so the
// timeline is unbounded and needs no cluster; what a cluster knows of each
// entry (its task's result) is added by the reader that has one (the web
// UI, `styrminctl history`).
//
// It reads only, and only each lockfile's summary (sequence, kind,
// driver, application version, digest, source commit): a lockfile that
// does not read is an entry with an error, not the end of the timeline,
// and no entry holds a value of the configuration, let alone a secret.
package timeline
