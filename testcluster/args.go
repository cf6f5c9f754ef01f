package testcluster

import (
	"fmt"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// arg is one parsed command-line flag.
type arg struct{ name, value string }

// parseArgs parses "--name=value" (or "name=value", or "--name" meaning
// "true") flags, keeping their order.
func parseArgs(raw []string) ([]arg, error) {
	out := make([]arg, 0, len(raw))
	for i, r := range raw {
		s := strings.TrimLeft(r, "-")
		name, value, ok := strings.Cut(s, "=")
		if !ok {
			value = "true"
		}
		if name == "" || strings.ContainsAny(name, " \t") {
			return nil, fmt.Errorf("item %d %q: want --name=value", i, r)
		}
		out = append(out, arg{name: name, value: value})
	}
	return out, nil
}

// applyArgs sets each flag on args: the first occurrence of a name replaces
// any default, later ones add values.
func applyArgs(args *envtest.Arguments, extra []arg) {
	seen := map[string]bool{}
	for _, a := range extra {
		if seen[a.name] {
			args.Append(a.name, a.value)
			continue
		}
		seen[a.name] = true
		args.Set(a.name, a.value)
	}
}
