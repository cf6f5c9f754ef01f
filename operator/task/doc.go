// Package task owns the StyrminTask controller: a task runs the steps of
// its workflow (planner.Steps) in order, one task of a deployment at a
// time in sequence order, each step's state persisted before and after
// its action runs, so an agent killed at any point resumes at the step
// that was running. It owns the action primitives (stop and start
// components, runJob, exec, waitReady, and the core step that writes the
// StyrminDeployment through the guard) and their metrics.
//
// A reconcile is a chain of phases (prepare, supersede, await turn, run
// steps); each call of a step's action becomes one typed decision
// (decide), applied in one switch.
package task
