// Package gitsource owns git access through go-git: opening, cloning and
// fetching repositories, an fs.FS over any commit, walking lock commits, and
// committing and pushing locks with compare-and-swap retries. It does not
// parse configuration: it deals in paths, bytes, commits and trailers.
//
// # Repositories
//
// A Repo tracks one branch. Open opens a repository on disk (from any
// directory of its worktree, or a bare repository); Clone makes a bare clone
// of one branch into a directory or, with dir "", into memory (the agent's
// case). Clone and Open with OpenOptions.Remote put the Repo in remote mode:
// Fetch updates refs/remotes/<remote>/<branch> and CommitLocks pushes. Open
// without a remote is local mode: no network, CommitLocks commits onto the
// local branch.
//
// Remotes are https (Auth.Token, sent as the basic-auth password), ssh
// (Auth.SSHKey, host keys checked against Auth.KnownHosts or the user's
// known_hosts files) or local paths. Local paths go through go-git's file
// transport, which runs the installed git-upload-pack / git-receive-pack;
// nothing is registered in go-git's global protocol table. Credentials never
// appear in errors (URLs are redacted, Auth.String hides secrets); refused
// credentials give an error wrapping ErrAuth.
//
// Fetch costs one round trip when the remote head has not moved and then
// reports FetchResult.Moved false. In a clone made by Clone the local branch
// (and so "main" or "HEAD" for Resolve) follows what was last fetched or
// pushed; in a repository opened with Open only the remote-tracking ref
// moves. Network operations stop when their context ends; give them a
// deadline.
//
// # Reading a commit
//
// Resolve turns a revision into a Hash; FS returns a read-only fs.FS over
// that commit's tree, read from the object store without a checkout
// (fs.ReadFileFS, fs.ReadDirFS, fs.StatFS, fs.ReadLinkFS). Symbolic links are
// reported but never followed (ErrSymlink), so a link in the repository
// cannot lead a reader outside it. The uncommitted worktree is os.DirFS on
// WorktreeDir.
//
// # Walking lock commits
//
// LockChanges(from, to, prefix) lists every file under prefix changed by the
// commits reachable from to but not from from, oldest first along the first
// parent, side branches just before the merge that brings them in, each
// change once. Each LockChange carries the commit's Styrmin-Lock trailers.
//
// # Committing locks
//
// CommitLocks is the compare-and-swap loop: take the branch head (fetched, in
// remote mode), call the caller's BuildFunc on it (where the caller resolves
// again and renumbers sequences), write the commit's trees and blobs directly
// onto the head's tree, and move the branch only if it is still at that head
// (a push naming the old head, without force; or a ref compare-and-swap
// locally). When the branch moved, back off with jitter and try again, up to
// MaxAttempts (then ErrConflict). Other errors return at once. A change that
// leaves the tree unchanged makes no commit. In local mode the checked-out
// worktree and index are updated for the changed paths so `git status` stays
// clean, and paths with uncommitted changes are refused (ErrDirtyWorktree).
//
// The commit message is
//
//	styrmin: lock <summary>
//
//	Styrmin-Lock: <cluster>/<env>/<name>=<sequence>
//	...
//
// with one trailer per deployment, sorted (FormatMessage, ParseLockTrailers).
// Readers of history (LockChanges, LockedSequences) skip a malformed
// trailer and report it (LockTrailers): the lockfiles are what counts.
//
// # Concurrency
//
// go-git is not safe for concurrent use, even for reads; a Repo serialises
// all access with its own mutex, so a Repo and the file systems it returns
// may be used from several goroutines. Separate Repos on the same directory
// only coordinate through the branch compare-and-swap.
//
// The gitserver subpackage serves bare repositories over real HTTP (git
// http-backend) for tests of this and other packages.
package gitsource
