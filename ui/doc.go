// Package ui serves Styrmin's read-only web pages as an http.Handler: the
// overview of every cluster's environments and deployments, a deployment
// (its active instance, resolved settings and the layer that set each,
// components and pods, conditions, events, release objects), its timeline
// from git (every lock commit, not only the tasks a cluster keeps, and the
// plan between any two), a task (its steps, their durations and output)
// and the plan of any ref against another.
//
// The handler is built by New from small readers: one controller-runtime
// client.Reader per cluster (the agent's cache, or a kubeconfig context's
// client in `styrminctl ui`), a git repository (gitsource.Repo) and the
// planner (planner.ComputeTrees). It reads only. The pages are rendered on
// the server with html/template (everything escaped for where it lands);
// a static script replaces a live page's content with a fresh copy every
// few seconds, and the pages work without it.
//
// Security, as the issue that asked for it says: only GET and HEAD are
// served (anything else is 405); no page holds a secret's value
// (instances, tasks and events hold placeholders for sensitive values,
// and every text shown is masked for them again, as the planner shows
// them); every response carries a strict Content-Security-Policy (no
// inline script or style: script, styles and images come from the
// handler itself), X-Content-Type-Options, a Referrer-Policy and a frame
// ban. The callers bind it to localhost unless told otherwise, and a
// request whose Host header is not a loopback name or address, nor a host
// the handler is configured with (Options.AllowedHosts, Options.Addr), is
// refused: a web page whose name is rebound to the UI's address (DNS
// rebinding) reads nothing.
package ui
