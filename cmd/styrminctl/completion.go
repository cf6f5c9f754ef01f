package main

import (
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/resolver"
)

// completion is a cobra ValidArgsFunction.
type completion = func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective)

// registerCompletions completes the arguments of root's commands (the -o
// values complete where the flag is added): deployment ids and, for
// upgrade, CLUSTER/ENV from the --repo repository's folders
// (resolver.ListDeployments, no file read), driver names and versions
// from its drivers/ folder.
func (g *globalOptions) registerCompletions(root *cobra.Command) {
	set := func(path string, f completion) {
		if c, _, err := root.Find(strings.Fields(path)); err == nil && c != root {
			c.ValidArgsFunction = f
		}
	}
	ids := g.completeIDs(false)
	for _, path := range []string{"explain", "diff", "status", "history"} {
		set(path, firstArg(ids))
	}
	set("retry", ids)
	set("upgrade", firstArg(g.completeIDs(true)))
	set("drivers show", firstArg(g.completeDrivers))
	if c, _, err := root.Find([]string{"tasks", "list"}); err == nil {
		_ = c.RegisterFlagCompletionFunc("deployment", ids)
	}
}

// firstArg completes the first argument with f, and nothing after it.
func firstArg(f completion) completion {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return f(cmd, args, toComplete)
	}
}

// completeIDs completes CLUSTER/ENV/NAME, and CLUSTER/ENV too with envs.
func (g *globalOptions) completeIDs(envs bool) completion {
	return func(_ *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		var out []string
		for _, id := range resolver.ListDeployments(os.DirFS(g.Repo)) {
			if env := id.Cluster + "/" + id.Environment; envs && !slices.Contains(out, env) && strings.HasPrefix(env, toComplete) {
				out = append(out, env)
			}
			if s := id.String(); strings.HasPrefix(s, toComplete) && !slices.Contains(args, s) {
				out = append(out, s)
			}
		}
		directive := cobra.ShellCompDirectiveNoFileComp
		if envs {
			directive |= cobra.ShellCompDirectiveNoSpace // CLUSTER/ENV may go on to /NAME
		}
		return out, directive
	}
}

// completeDrivers completes NAME and NAME@VERSION of the repository's
// drivers.
func (g *globalOptions) completeDrivers(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	folders, _ := drivers.Folders(os.DirFS(g.Repo), "drivers")
	var out []string
	for _, f := range folders {
		for _, s := range []string{f.Name, f.Name + "@" + f.Version} {
			if strings.HasPrefix(s, toComplete) && !slices.Contains(out, s) {
				out = append(out, s)
			}
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}
