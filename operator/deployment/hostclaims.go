package deployment

import (
	"fmt"
	"sync"
	"time"

	"github.com/styrmin/styrmin/drivers"
)

// pendingHostsFor is how long the hosts an apply (or a correction) took
// stay claimed in the agent's table once it ended while the cache does
// not show its Ingress: the cache shows it within moments, and an Ingress
// deleted at once, or never made by an apply that failed early, does not
// hold its host for ever.
const pendingHostsFor = 30 * time.Second

// pendingHostRetry is how soon an apply that met another apply's claim on
// its host in the table looks again: that apply ends, and its Ingress
// reaches the cache, in moments.
const pendingHostRetry = 2 * time.Second

// ingressClaim is one host claim of one Ingress of a deployment.
type ingressClaim struct {
	// ingress is the Ingress's name, in the deployment's namespace.
	ingress string
	claim   drivers.HostClaim
}

// pendingHosts are the claims one deployment's apply took in the table.
type pendingHosts struct {
	// deployment is the deployment's ID, for messages.
	deployment string
	claims     []ingressClaim
	// ended is when the apply ended with objects maybe applied (zero:
	// it runs).
	ended time.Time
}

// hostTable is the hosts this agent's applies are taking: the cache's
// Ingresses show a host once its apply made the Ingress and the watch
// brought it, so two workers applying two deployments' Ingresses of one
// host at the same moment both found the host free and both took it. An
// apply takes its hosts here, under one mutex, before it looks at the
// cache, and keeps them until the cache shows its Ingress holding them
// (or pendingHostsFor after its end): of two such applies, the later
// meets the first's claim and waits. One agent acts at a time (leader
// election), so the table of the one acting is enough.
type hostTable struct {
	mu   sync.Mutex
	byNS map[string]*pendingHosts // by the deployment's namespace
}

// hostConflict is another deployment's claim in the table that one of
// the claims asked for overlaps.
type hostConflict struct {
	mine      ingressClaim
	namespace string
	theirs    *pendingHosts
	held      ingressClaim
}

func (c *hostConflict) Error() string {
	state := "is applying"
	if !c.theirs.ended.IsZero() {
		state = "has just applied"
	}
	tls := ""
	if m, h := c.mine.claim, c.held.claim; m.Host == h.Host && m.TLS != h.TLS {
		tls = fmt.Sprintf(" with %s, against %s", m.TLSString(), h.TLSString())
	}
	return fmt.Sprintf("Ingress %s claims host %s%s, which deployment %s (namespace %s) %s (Ingress %s/%s, host %s); looking again in a moment",
		c.mine.ingress, c.mine.claim, tls, c.theirs.deployment, c.namespace, state, c.namespace, c.held.ingress, c.held.claim.Host)
}

// hostMatch are the checks take makes: overlap says whether two claims
// route some request alike (the cluster's default class taken into
// account), shown whether the cache shows the Ingress of the claim c of
// the deployment of namespace holding it (the cache's check answers for
// it from then on).
type hostMatch struct {
	overlap func(a, b drivers.HostClaim) bool
	shown   func(namespace string, c ingressClaim) bool
}

// take records claims as the apply of the deployment of namespace
// (replacing what it took before), unless another deployment's claim in
// the table overlaps one of them: then nothing is taken and the conflict
// is returned. Claims of ended applies that the cache now shows, or older
// than pendingHostsFor, are dropped on the way.
func (t *hostTable) take(namespace, deployment string, claims []ingressClaim, m hostMatch, now time.Time) (*pendingHosts, *hostConflict) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(claims) == 0 {
		delete(t.byNS, namespace)
		return nil, nil
	}
	if t.byNS == nil {
		t.byNS = map[string]*pendingHosts{}
	}
	for ns, p := range t.byNS {
		if ns == namespace {
			continue
		}
		if !p.ended.IsZero() && now.Sub(p.ended) > pendingHostsFor {
			delete(t.byNS, ns)
			continue
		}
		if c := p.meet(ns, claims, m); c != nil {
			return nil, c
		}
		if len(p.claims) == 0 {
			delete(t.byNS, ns)
		}
	}
	p := &pendingHosts{deployment: deployment, claims: claims}
	t.byNS[namespace] = p
	return p, nil
}

// meet is the first of p's claims (those of the deployment of namespace)
// that one of claims overlaps, as a conflict; those of an ended apply
// that the cache shows are dropped.
func (p *pendingHosts) meet(namespace string, claims []ingressClaim, m hostMatch) *hostConflict {
	kept := p.claims[:0]
	var conflict *hostConflict
	for _, held := range p.claims {
		shown := m.shown(namespace, held)
		if shown && !p.ended.IsZero() {
			continue
		}
		kept = append(kept, held)
		if conflict != nil || shown {
			// Shown: the cache's check answers for it.
			continue
		}
		for _, c := range claims {
			if m.overlap(c.claim, held.claim) {
				conflict = &hostConflict{mine: c, namespace: namespace, theirs: p, held: held}
				break
			}
		}
	}
	p.claims = kept
	return conflict
}

// end records that the apply that took p ended; applied is false when it
// applied nothing (its claims go at once).
func (t *hostTable) end(namespace string, p *pendingHosts, applied bool, now time.Time) {
	if p == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byNS[namespace] != p {
		return // taken again since
	}
	if !applied {
		delete(t.byNS, namespace)
		return
	}
	p.ended = now
}
