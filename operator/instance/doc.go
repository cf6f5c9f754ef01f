// Package instance owns the contract between a task and the
// StyrminDeployment it writes: an instance as a StyrminDeployment spec
// and back (refusing a spec edited by hand), the sequence guard
// (WriteInstance) and the held sequence, whether a StyrminDeployment runs
// a sequence (Applied), reading a task's instance from its lock in git
// (RepoLocks), and, in the agent, whether a change whose task's last step
// writes the instance ends recorded active or its task Failed
// (ActiveClaims).
package instance
