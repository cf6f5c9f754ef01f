// Package outcome owns the agent's error classes, stalled (needs a
// change in git) and retryable (the world may change), and Map, the one
// mapping from an error to what a controller does with it. Errors are
// classified where they happen; controllers only map them.
package outcome
