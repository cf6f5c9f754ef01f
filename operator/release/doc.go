// Package release owns a deployment's Helm release: its revisions,
// recorded in Helm's own storage format (so `helm list`, `helm history`
// and `helm uninstall` work), the server-side apply of a revision's
// objects, pruning, uninstall, and the drift check and correction by
// field ownership. Its surface is New and the verbs Apply, Uninstall,
// Check and Correct; it imports no controller.
package release
