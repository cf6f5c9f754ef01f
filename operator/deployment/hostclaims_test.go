package deployment

import (
	"strings"
	"testing"
	"time"

	"github.com/styrmin/styrmin/drivers"
)

// TestTheHostTableHoldsAnAppliesHostsUntilTheCacheShowsThemOrTheyExpire:
// an apply's hosts stay taken while it runs, and once it ended until the
// cache shows its Ingress (the cache's check answers from then on) or
// pendingHostsFor passed; an apply that applied nothing frees them at
// once; a deployment's own earlier claims never stop it.
func TestTheHostTableHoldsAnAppliesHostsUntilTheCacheShowsThemOrTheyExpire(t *testing.T) {
	claim := func(host string) []ingressClaim {
		return []ingressClaim{{ingress: "web", claim: drivers.HostClaim{Class: "nginx", Host: host}}}
	}
	shown := false
	m := hostMatch{
		overlap: func(a, b drivers.HostClaim) bool { return a.Overlaps(b) },
		shown:   func(string, ingressClaim) bool { return shown },
	}
	now := time.Now()
	var tb hostTable
	a, c := tb.take("a", "local/a/web", claim("x.example.com"), m, now)
	if c != nil || a == nil {
		t.Fatalf("first take: %v", c)
	}
	if _, c := tb.take("b", "local/b/web", claim("*.example.com"), m, now); c == nil {
		t.Fatal("a wildcard over a host another apply is taking was taken")
	}
	if _, c := tb.take("a", "local/a/web", claim("x.example.com"), m, now); c != nil {
		t.Fatalf("a deployment met its own claim: %v", c)
	}
	a, _ = tb.take("a", "local/a/web", claim("x.example.com"), m, now)
	tb.end("a", a, true, now)
	if _, c := tb.take("b", "local/b/web", claim("x.example.com"), m, now.Add(pendingHostsFor/2)); c == nil {
		t.Fatal("taken while the cache does not show the ended apply's Ingress yet")
	}
	if _, c := tb.take("b", "local/b/web", claim("x.example.com"), m, now.Add(2*pendingHostsFor)); c != nil {
		t.Fatalf("an ended apply's claim held past pendingHostsFor: %v", c)
	}

	a, _ = tb.take("a", "local/a/web", claim("y.example.com"), m, now)
	tb.end("a", a, true, now)
	shown = true
	if _, c := tb.take("c", "local/c/web", claim("y.example.com"), m, now); c != nil {
		t.Fatalf("held once the cache shows it: %v", c)
	}
	shown = false
	a, _ = tb.take("a", "local/a/web", claim("z.example.com"), m, now)
	tb.end("a", a, false, now)
	if _, c := tb.take("d", "local/d/web", claim("z.example.com"), m, now); c != nil {
		t.Fatalf("held after an apply that applied nothing: %v", c)
	}
}

// TestTwoAppliesServingOneHostOverTLSApartMeetInTheTable: two workers
// applying other paths of one host with other TLS Secrets at the same
// moment both found the cache without the other's Ingress; the table
// the agent matches claims with (defaultClass.meets) now makes the later
// wait, naming both Secrets; the same Secret passes.
func TestTwoAppliesServingOneHostOverTLSApartMeetInTheTable(t *testing.T) {
	m := hostMatch{overlap: defaultClass("nginx").meets, shown: func(string, ingressClaim) bool { return false }}
	claim := func(class, path, tls string) []ingressClaim {
		return []ingressClaim{{ingress: "web", claim: drivers.HostClaim{Class: class, Host: "example.com", Path: path, TLS: tls}}}
	}
	now := time.Now()
	var tb hostTable
	if _, c := tb.take("a", "local/a/web", claim("nginx", "/", "web-tls"), m, now); c != nil {
		t.Fatalf("first take: %v", c)
	}
	_, c := tb.take("b", "local/b/api", claim("", "/api", "api-tls"), m, now)
	if c == nil {
		t.Fatal("another path of the host, served with another Secret on the default class, was taken")
	}
	for _, want := range []string{"with TLS Secret api-tls, against TLS Secret web-tls", "local/a/web"} {
		if !strings.Contains(c.Error(), want) {
			t.Errorf("%q does not say %q", c.Error(), want)
		}
	}
	if _, c := tb.take("b", "local/b/api", claim("nginx", "/api", "web-tls"), m, now); c != nil {
		t.Errorf("another path of the host with the same Secret: %v", c)
	}
}

// TestAClaimWithoutAClassIsTheDefaultClasss: "" and the default class's
// name are one class, for the overlap and the index keys looked up.
func TestAClaimWithoutAClassIsTheDefaultClasss(t *testing.T) {
	d := defaultClass("nginx")
	bare := drivers.HostClaim{Host: "a.example.com"}
	named := drivers.HostClaim{Class: "nginx", Host: "a.example.com"}
	other := drivers.HostClaim{Class: "traefik", Host: "a.example.com"}
	if !d.overlap(bare, named) || !d.overlap(named, bare) || d.overlap(bare, other) {
		t.Fatal("overlap does not take \"\" as the default class")
	}
	if defaultClass("").overlap(bare, named) {
		t.Fatal("without a default class, \"\" met a named class")
	}
	for _, c := range []drivers.HostClaim{bare, named} {
		keys := d.lookupKeys(c)
		for _, live := range []drivers.HostClaim{bare, named} {
			if !containsAny(keys, live.IndexKeys()) {
				t.Errorf("lookup keys %v of %+v miss the live %+v (index keys %v)", keys, c, live, live.IndexKeys())
			}
		}
	}
}

func containsAny(keys, want []string) bool {
	for _, k := range keys {
		for _, w := range want {
			if k == w {
				return true
			}
		}
	}
	return false
}
