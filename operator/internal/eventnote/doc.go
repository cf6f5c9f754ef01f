// Package eventnote owns the bound on what the agent's events say: the
// events API refuses a note over 1,024 bytes, and a refused event is lost
// (the broadcaster only logs it), so every recorder of the agent cuts its
// notes to fit.
package eventnote
