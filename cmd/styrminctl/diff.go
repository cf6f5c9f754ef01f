package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/planner"
	"github.com/styrmin/styrmin/resolver"
)

// newDiffCmd builds `styrminctl diff CLUSTER/ENV/NAME`: the plan of one
// deployment in full detail.
func newDiffCmd(g *globalOptions, stdout io.Writer) *cobra.Command {
	f := &planFlags{}
	cmd := &cobra.Command{
		Use:         "diff CLUSTER/ENV/NAME",
		Annotations: map[string]string{readsRepo: "true", readsCommitWith: "head"},
		Short:       "Show one deployment's plan in full detail",
		Example: `  styrminctl diff local/dev/hub
  styrminctl diff local/dev/hub --base HEAD~1 --color never`,
		Long: `diff is plan for one deployment, in full detail: every changed context and
values path, the driver actions, and the rendered manifests of added and removed
objects as well as the unified diff of changed ones. It compares the working tree
(or --head) with the lockfile at the base revision, like plan.

Exit codes: 0 success (changes or not), 1 error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := resolver.ParseID(args[0])
			if err != nil {
				return err
			}
			format, err := planner.ParseFormat(f.output)
			if err != nil {
				return err
			}
			p, err := computePlan(g, f, map[resolver.ID]bool{id: true}, nil)
			if err != nil {
				return err
			}
			if len(p.Errors) > 0 {
				return fmt.Errorf("%s: %s", p.Errors[0].ID, p.Errors[0].Message)
			}
			if len(p.Deployments) == 0 && len(p.Held) > 0 && format == planner.FormatText {
				// On hold: resolved, but kept at its lock (planner.Held).
				h := p.Held[0]
				waits := "nothing waits: the configuration resolves to the locked instance"
				if h.Waiting {
					waits = "a change waits: it is locked and applied once the hold is lifted"
				}
				_, err := fmt.Fprintf(stdout, "%s: on hold (%s); %s\n", id, h.Reason, waits)
				return err
			}
			if len(p.Deployments) == 0 && p.Summary.Unchanged == 0 && len(p.Held) == 0 {
				return fmt.Errorf("deployment %s is neither defined in the configuration nor locked at the base %s", id, p.Base)
			}
			ro, err := renderOptions(f, stdout, true)
			if err != nil {
				return err
			}
			if len(p.Deployments) == 0 && format == planner.FormatText {
				_, err := fmt.Fprintf(stdout, "%s: no changes: the configuration resolves to the locked instance\n", id)
				return err
			}
			if err := planner.Render(stdout, p, format, ro); err != nil {
				return err
			}
			return planExit(cmd.ErrOrStderr(), p, false)
		},
	}
	f.register(cmd)
	return cmd
}
