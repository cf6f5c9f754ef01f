// Package e2e holds Styrmin's end-to-end tests: the styrminctl and
// styrmin-agent binaries built from this module, a desired-state
// repository made from examples/ served over real git smart-HTTP, and a
// local control plane whose fake nodes run the workloads. They run with
// `go test ./e2e/` (and in `go test ./...`); each test function starts
// one control plane and shares it across its steps.
package e2e
