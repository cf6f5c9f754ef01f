package resolver

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// SharedDomains warns of the environments of one name that two or more
// clusters give one domain (an environment's own, else its cluster's):
// drivers build their external hosts from the domain and the
// environment's and deployment's names, so those clusters render the same
// hosts, and their DNS records (external-dns in each cluster, a wildcard
// record, a certificate) would meet: traffic for one cluster's
// deployment may reach the other's. It warns rather than refuses: a
// blue/green or active/active pair serves one domain from two clusters on
// purpose, which every cluster.cue of the group says with sharedDomain:
// true, and then nothing is said. A deployment's own domain is not looked
// at. Each warning names the files that set the domain; sorted by
// environment and domain.
func SharedDomains(repo *Repository) []string {
	if repo == nil {
		return nil
	}
	type key struct{ env, domain string }
	type user struct {
		cluster *Cluster
		file    string
	}
	groups := map[key][]user{}
	for _, c := range repo.Clusters {
		for _, e := range c.Environments {
			domain, file := domainOf(c, e)
			if domain == "" {
				continue
			}
			k := key{e.Name, domain}
			groups[k] = append(groups[k], user{c, file})
		}
	}
	var out []string
	for _, k := range slices.SortedFunc(maps.Keys(groups), func(a, b key) int {
		return cmp.Or(strings.Compare(a.env, b.env), strings.Compare(a.domain, b.domain))
	}) {
		users := groups[k]
		if len(users) < 2 || !slices.ContainsFunc(users, func(u user) bool { return !u.cluster.SharedDomain }) {
			continue
		}
		var names, files []string
		for _, u := range users {
			names, files = append(names, u.cluster.Name), append(files, u.file)
		}
		out = append(out, fmt.Sprintf("%s: field domain: clusters %s each give environment %s the domain %q, so deployments of one name there render the same external hosts and their DNS records meet (traffic for one cluster's may reach the other's): give each cluster its own domain, or, when they serve it together on purpose (a blue/green or active/active pair), set sharedDomain: true in each of their cluster.cue",
			strings.Join(files, ", "), strings.Join(names, ", "), k.env, k.domain))
	}
	return out
}

// domainOf is environment e's domain and the file that sets it: its own,
// else its cluster's ("" when neither sets one).
func domainOf(c *Cluster, e *Environment) (string, string) {
	if d, ok := e.Settings["domain"].(string); ok {
		return d, e.File
	}
	d, _ := c.Settings["domain"].(string)
	return d, c.File
}
