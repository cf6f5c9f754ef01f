// Package afterwrite owns reads that must be no older than the reader's
// own last write: a controller reads from its informer's cache, which may
// not have seen the write it made a moment ago, and a decision or a patch
// computed from such a copy can undo or skip what that write did.
package afterwrite
