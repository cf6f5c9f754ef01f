// Package webhook owns the agent's GitHub webhook receiver: it verifies the
// X-Hub-Signature-256 HMAC in constant time, bounds body sizes, ignores
// replayed deliveries and turns a push to the tracked branch into an
// immediate sync. It knows nothing about git or Kubernetes beyond a
// function that returns the shared secret.
package webhook
