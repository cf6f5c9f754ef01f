// Package commitstatus reports results to the git host as GitHub commit
// statuses (POST /repos/{owner}/{repo}/statuses/{sha}), so a merged pull
// request shows whether each cluster applied its lock commit: one status
// context per cluster ("styrmin/prod-eu"), pending while the commit's
// tasks run, success when they all succeeded (or were superseded by a
// newer instance), failure when one failed.
//
// It is a small client of that documented endpoint, and of the one that
// reads a commit's statuses back (GET
// /repos/{owner}/{repo}/commits/{sha}/status), for github.com and GitHub
// Enterprise (Options.BaseURL). A rate limit's refusal says how long to
// wait (HTTPError.RateLimited, HTTPError.RetryAfter), and
// HTTPError.RateLimitWait bounds it for every user of the client alike.
// The token is sent only in the Authorization header, only to BaseURL's host, never over plain http
// unless the host is a loopback address (tests), and never appears in an
// error, a log line or the client's printed form.
package commitstatus
