package resolver

import (
	"errors"
	"strings"
	"testing"
)

// TestAnEnvironmentsIngressControllerInAReservedNamespaceIsRefusedAtLockTime
// pins that an environment whose dedicated ingress controller would run
// in a reserved namespace (its namespacePrefix, or its folder's name,
// "kube") fails to resolve with a ConfigError in its environment file at
// namespacePrefix, and nothing is locked: a lockfile holding such a
// namespace is one DecodeLock refuses, which would break every later lock
// and plan of the repository.
func TestAnEnvironmentsIngressControllerInAReservedNamespaceIsRefusedAtLockTime(t *testing.T) {
	const devEnv = "clusters/local/environments/dev/environment.cue"
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		id    ID
		want  []string
	}{
		{"an environment folder named kube", func(t *testing.T, dir string) {
			writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: driver: "ingress-nginx"`))
			writeFile(t, dir, "clusters/local/environments/kube/environment.cue", "dedicatedIngress: true\n")
		}, EnvironmentIngressID("local", "kube"),
			[]string{"clusters/local/environments/kube/environment.cue:1:1: field namespacePrefix", `namespace "kube-styrmin-ingress"`, "reserved"}},
		{"namespacePrefix kube", func(t *testing.T, dir string) {
			writeFile(t, dir, "clusters/local/cluster.cue", withIngress(`ingress: driver: "ingress-nginx"`+"\ndedicatedIngress: true"))
			writeFile(t, dir, devEnv, "namespacePrefix: \"kube\"\n")
		}, devIngress,
			[]string{devEnv + ":1:18: field namespacePrefix", `namespace "kube-styrmin-ingress"`, "reserved"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := exampleCopy(t)
			tc.setup(t, dir)
			before := snapshot(t, dir)
			res, locks, err := resolveDir(t, dir)
			if res == nil {
				t.Fatalf("load: %v", err)
			}
			var got error
			for _, e := range res.Errors {
				if e.ID == tc.id {
					got = e.Err
				}
			}
			var ce *ConfigError
			if !errors.As(got, &ce) {
				t.Fatalf("%s: error %v, want a ConfigError", tc.id, got)
			}
			for _, w := range tc.want {
				if !strings.Contains(ce.Error(), w) {
					t.Errorf("error %q does not mention %q", ce, w)
				}
			}
			if _, ok := res.Get(tc.id); ok {
				t.Errorf("%s resolved", tc.id)
			}
			if _, err := planLocksStrict(res, locks); err == nil {
				t.Error("the lock went ahead")
			}
			if snapshot(t, dir) != before {
				t.Error("bad input changed the repository")
			}
		})
	}
}
