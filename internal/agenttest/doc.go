// Package agenttest holds what the agent's integration tests share (the
// operator's and the end-to-end ones): a control plane with Styrmin's CRDs
// and a client of its scheme, the agent's namespace, RBAC and repository
// credentials from config/, a kubeconfig that acts as the agent's service
// account, a git server with the desired-state repository, and the agent
// binary run as a subprocess whose log is kept and shown when a test
// fails. It is for tests only.
package agenttest
