package resolver

import (
	"slices"
	"strings"
	"testing"
)

// TestTwoClustersGivingAnEnvironmentOfOneNameOneDomainAreWarnedOf: two
// clusters of one repository with one domain and an environment of one
// name render the same external hosts, and nothing said so: a
// cluster.cue copied for a new cluster, its domain kept, sent the DNS
// records (and traffic) of one cluster's deployments to the other's.
// Plan and lock now warn, naming the files that set the domain, unless
// every cluster of the group says sharedDomain: true (a blue/green pair
// serving one domain on purpose); they do not refuse.
func TestTwoClustersGivingAnEnvironmentOfOneNameOneDomainAreWarnedOf(t *testing.T) {
	type env struct{ name, domain string }
	cluster := func(name, domain string, shared bool, envs ...env) *Cluster {
		c := &Cluster{Name: name, File: "clusters/" + name + "/cluster.cue", Settings: map[string]any{}, SharedDomain: shared}
		if domain != "" {
			c.Settings["domain"] = domain
		}
		for _, e := range envs {
			ev := &Environment{Name: e.name, File: "clusters/" + name + "/environments/" + e.name + "/environment.cue", Settings: map[string]any{}}
			if e.domain != "" {
				ev.Settings["domain"] = e.domain
			}
			c.Environments = append(c.Environments, ev)
		}
		return c
	}
	prod, dev := env{"prod", ""}, env{"dev", ""}
	for _, tc := range []struct {
		name     string
		clusters []*Cluster
		want     []string // one substring list per warning, in order
	}{
		{"own domains", []*Cluster{cluster("eu", "eu.example.com", false, prod), cluster("us", "us.example.com", false, prod)}, nil},
		{"one domain, other environments", []*Cluster{cluster("eu", "example.com", false, prod), cluster("us", "example.com", false, dev)}, nil},
		{"one domain, one environment", []*Cluster{cluster("eu", "example.com", false, prod), cluster("us", "example.com", false, prod)},
			[]string{`clusters/eu/cluster.cue, clusters/us/cluster.cue: field domain: clusters eu, us each give environment prod the domain "example.com"`, "same external hosts", "sharedDomain: true"}},
		{"each environment of one name warned of, sorted", []*Cluster{cluster("blue", "example.com", false, prod, dev), cluster("green", "example.com", false, prod, dev)},
			[]string{"environment dev", "environment prod"}},
		{"blue/green pair on purpose", []*Cluster{cluster("blue", "example.com", true, prod), cluster("green", "example.com", true, prod)}, nil},
		{"only one of the pair says so", []*Cluster{cluster("blue", "example.com", true, prod), cluster("green", "example.com", false, prod)},
			[]string{"clusters blue, green"}},
		{"an environment's own domain, named in its file", []*Cluster{cluster("eu", "eu.example.com", false, env{"prod", "example.com"}), cluster("us", "example.com", false, prod)},
			[]string{"clusters/eu/environments/prod/environment.cue, clusters/us/cluster.cue", `"example.com"`}},
		{"an environment's own domain moves it apart", []*Cluster{cluster("eu", "example.com", false, env{"prod", "eu.example.com"}), cluster("us", "example.com", false, prod)}, nil},
		{"no domain", []*Cluster{cluster("eu", "", false, prod), cluster("us", "", false, prod)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := SharedDomains(&Repository{Clusters: tc.clusters})
			if len(tc.want) == 0 {
				if len(got) != 0 {
					t.Fatalf("warnings %q, want none", got)
				}
				return
			}
			all := strings.Join(got, "\n")
			last := -1
			for _, w := range tc.want {
				i := strings.Index(all[last+1:], w)
				if i < 0 {
					t.Fatalf("warnings %q lack %q (in order)", got, w)
				}
				last += 1 + i
			}
			if again := SharedDomains(&Repository{Clusters: tc.clusters}); !slices.Equal(again, got) {
				t.Errorf("a second run says %q, then %q", got, again)
			}
		})
	}
}
