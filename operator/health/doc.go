// Package health owns readiness: of the workloads a release holds, summed
// up per driver component, read the way `kubectl rollout status` reads
// them. Both controllers use it: the StyrminDeployment controller for its
// Ready condition, the task controller's actions for what they wait for.
package health
