// Package webhook owns the agent's GitHub webhook receiver: it verifies the
// X-Hub-Signature-256 HMAC in constant time over the raw body (JSON or
// GitHub's default form encoding), bounds what a request costs before its
// signature is checked (a limited number read at once, slow senders cut
// off, body size and time, header size and time), refuses replayed
// deliveries (by id and by body hash) and hands a push to the tracked
// branch to OnPush, which the agent uses to record a sync request on its
// StyrminSource. It knows nothing about git, and of Kubernetes only the
// Secret holding the shared secret.
package webhook
