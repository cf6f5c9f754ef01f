package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/internal/keypath"
	"github.com/styrmin/styrmin/resolver"
)

// newExplainCmd builds `styrminctl explain CLUSTER/ENV/NAME [PATH]`: the
// resolved settings of one deployment and the layer and file that set each
// value.
func newExplainCmd(g *globalOptions, stdout io.Writer) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:         "explain CLUSTER/ENV/NAME [PATH]",
		Annotations: map[string]string{readsRepo: "true"},
		Short:       "Show a deployment's resolved settings and where each value came from",
		Example: `  styrminctl explain local/dev/hub
  styrminctl explain local/dev/hub parameters.logLevel -o json`,
		Long: `explain resolves the working tree and prints the merged settings of one
deployment (cluster → environment → deployment, most specific wins), each value
followed by the layer and file that set it. PATH (for example config.logLevel or
parameters) narrows the output to that part.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := resolver.ParseID(args[0])
			if err != nil {
				return err
			}
			prefix := ""
			if len(args) == 2 {
				prefix = args[1]
			}
			ws, _, err := headWorkspace(cmd.Context(), g)
			if err != nil {
				return err
			}
			res := ws.Resolve()
			r, ok := res.Get(id)
			if !ok {
				for _, e := range res.Errors {
					if e.ID == id {
						return e
					}
				}
				return fmt.Errorf("deployment %s is not defined in %s", id, g.Repo)
			}
			return printExplain(stdout, r, prefix, output)
		},
	}
	addOutputFlag(cmd, &output, dataOutputs()...)
	return cmd
}

type explainEntry struct {
	Path  string `json:"path"`
	Value any    `json:"value"`
	Layer string `json:"layer"`
	File  string `json:"file"`
}

func printExplain(w io.Writer, r *resolver.Resolved, prefix, output string) error {
	prov := r.Provenance.Under(prefix)
	if len(prov) == 0 {
		return fmt.Errorf("%s has no resolved value at %q (paths start with: %s)", r.Instance.ID, prefix, strings.Join(topLevel(r.Provenance), ", "))
	}
	settings := map[string]any{"parameters": r.Instance.Context.Parameters}
	for k, v := range r.Settings {
		if k != "parameters" {
			settings[k] = v
		}
	}
	var entries []explainEntry
	for _, p := range prov.Paths() {
		o := prov[p]
		entries = append(entries, explainEntry{Path: p, Value: shownValue(resolver.SettingAt(settings, p)), Layer: o.Layer, File: o.File})
	}
	switch output {
	case outJSON, outYAML:
		return writeData(w, output, entries)
	case outText:
		fmt.Fprintf(w, "%s (driver %s@%s, app %s)\n", r.Instance.ID, r.Instance.Driver.Name, r.Instance.Driver.Version, r.Instance.AppVersion)
		for _, e := range entries {
			v, _ := json.Marshal(e.Value)
			fmt.Fprintf(w, "  %s = %s\n      from %s (%s)\n", e.Path, v, e.Layer, e.File)
		}
		return nil
	default:
		return fmt.Errorf("flag --output: expected text, json or yaml, got %q", output)
	}
}

// sensitiveShown is what explain prints for a sensitive parameter: the
// instance holds only its placeholder, and even that is not for users.
const sensitiveShown = "(sensitive)"

// shownValue is v as explain prints it: a sensitive value's placeholder is
// shown as sensitiveShown.
func shownValue(v any) any {
	if s, ok := v.(string); ok {
		if _, ok := resolver.PlaceholderDigest(s); ok {
			return sensitiveShown
		}
	}
	return v
}

func topLevel(p resolver.Provenance) []string {
	seen := map[string]bool{}
	var out []string
	for _, k := range p.Paths() {
		keys, _ := keypath.Split(k)
		if len(keys) == 0 {
			continue
		}
		top := keypath.Join(keys[0])
		if !seen[top] {
			seen[top] = true
			out = append(out, top)
		}
	}
	return out
}
