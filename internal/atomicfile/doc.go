// Package atomicfile replaces files in a working tree so that a reader sees
// the old text or the new one, never a part of either, and a crash leaves at
// most a temporary file beside them, named with the caller's prefix for its
// loader to skip and a later run to remove.
package atomicfile
