// Package resolver owns the desired-state repository format: loading the
// repository's config from an fs.FS, layering cluster → environment →
// deployment, validation, the resolved context, instances, lockfile encoding
// and sequence numbers. It never talks to a cluster.
package resolver
