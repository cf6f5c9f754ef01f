package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	"github.com/styrmin/styrmin/drivers"
)

// newDriversCmd builds `styrminctl drivers`: list, show and lint the
// application drivers of the desired-state repository
// (<repo>/drivers/<name>/<version>/).
func newDriversCmd(g *globalOptions, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drivers",
		Short: "List, show and lint application drivers",
		Example: `  styrminctl drivers list
  styrminctl drivers show webapp@1.1.0 -o yaml
  styrminctl drivers lint drivers/webapp/1.1.0`,
	}
	cmd.AddCommand(newDriversListCmd(g, stdout), newDriversShowCmd(g, stdout), newDriversLintCmd(g, stdout))
	return cmd
}

func loadRepoCatalog(g *globalOptions) (*drivers.Catalog, error) {
	opts, err := g.driverLoadOptions(os.DirFS(g.Repo))
	if err != nil {
		return nil, err
	}
	return drivers.LoadCatalog(os.DirFS(g.Repo), "drivers", opts)
}

type driverSummary struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	AppVersions string `json:"appVersions"`
	Description string `json:"description,omitempty"`
	Digest      string `json:"digest"`
	Source      string `json:"source"`
}

func summarize(d *drivers.Driver) driverSummary {
	return driverSummary{Name: d.Name, Version: d.Version, AppVersions: d.AppVersions, Description: d.Description, Digest: d.Digest, Source: d.Source}
}

func newDriversListCmd(g *globalOptions, stdout io.Writer) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:         "list",
		Annotations: map[string]string{readsRepo: "true"},
		Short:       "List the driver versions of the repository with their supported application versions",
		Example: `  styrminctl drivers list
  styrminctl drivers list --repo ./desired-state -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cat, err := loadRepoCatalog(g)
			if err != nil {
				return err
			}
			list := []driverSummary{}
			for _, n := range cat.Names() {
				for _, d := range cat.Versions(n) {
					list = append(list, summarize(d))
				}
			}
			if output != "text" {
				return writeData(stdout, output, list)
			}
			if len(list) == 0 {
				_, err := fmt.Fprintf(stdout, "no drivers in %s\n", filepath.Join(g.Repo, "drivers"))
				return err
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tAPP VERSIONS\tDIGEST\tDESCRIPTION")
			for _, s := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", s.Name, s.Version, s.AppVersions, shortDigest(s.Digest), s.Description)
			}
			return tw.Flush()
		},
	}
	addOutputFlag(cmd, &output, dataOutputs()...)
	return cmd
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// driverDetail is what `drivers show` prints.
type driverDetail struct {
	driverSummary
	Parameters []parameterView              `json:"parameters"`
	Components []componentView              `json:"components"`
	Services   []serviceView                `json:"services"`
	Actions    map[string]map[string][]step `json:"actions"`
	// Backup tells whether the driver declares the backup and restore
	// hooks: only then can its deployments be backed up.
	Backup bool `json:"backup"`
}

type parameterView struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	Default    any    `json:"default,omitempty"`
	Required   bool   `json:"required"`
	Constraint string `json:"constraint,omitempty"`
	Sensitive  bool   `json:"sensitive,omitempty"`
	Doc        string `json:"doc,omitempty"`
}

type componentView struct {
	Name      string                     `json:"name"`
	Workloads []drivers.WorkloadSelector `json:"workloads"`
}

type serviceView struct {
	Name      string `json:"name"`
	Component string `json:"component"`
	Protocol  string `json:"protocol"`
	Port      int    `json:"port"`
	Ingress   bool   `json:"ingress"`
}

type step struct {
	Action     string            `json:"action"`
	Components []string          `json:"components,omitempty"`
	Component  string            `json:"component,omitempty"`
	Job        string            `json:"job,omitempty"`
	Command    []string          `json:"command,omitempty"`
	Timeout    string            `json:"timeout,omitempty"`
	Args       map[string]string `json:"args,omitempty"`
}

func detail(d *drivers.Driver) driverDetail {
	out := driverDetail{driverSummary: summarize(d), Parameters: []parameterView{}, Components: []componentView{}, Services: []serviceView{},
		Actions: map[string]map[string][]step{}}
	for _, p := range d.Parameters {
		v := parameterView{Name: p.Name, Type: p.Type, Constraint: p.Constraint, Sensitive: p.Sensitive, Doc: p.Doc,
			Required: !p.HasDefault && !p.Optional}
		if p.HasDefault && !p.Sensitive {
			v.Default = p.Default
		}
		out.Parameters = append(out.Parameters, v)
	}
	for _, c := range d.Components {
		out.Components = append(out.Components, componentView{Name: c.Name, Workloads: c.Workloads})
	}
	for _, s := range d.Services {
		out.Services = append(out.Services, serviceView{Name: s.Name, Component: s.Component, Protocol: s.Protocol, Port: s.Port, Ingress: s.Ingress})
	}
	out.Backup = d.CanBackup()
	for _, h := range append(drivers.LifecycleHooks(), drivers.OperationHooks()...) {
		m, ok := d.Hooks[h]
		if !ok {
			continue
		}
		modes := map[string][]step{}
		for _, mode := range m.Ordered() {
			for _, s := range mode.Steps {
				st := step{Action: string(s.Action), Components: s.Components, Component: s.Component, Job: s.Job, Command: s.Command, Args: s.Args}
				if s.Timeout > 0 {
					st.Timeout = s.Timeout.String()
				}
				modes[mode.Mode] = append(modes[mode.Mode], st)
			}
		}
		out.Actions[string(h)] = modes
	}
	return out
}

func newDriversShowCmd(g *globalOptions, stdout io.Writer) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:         "show NAME[@VERSION]",
		Annotations: map[string]string{readsRepo: "true"},
		Short:       "Show a driver version: parameters, components, services and actions",
		Example: `  styrminctl drivers show webapp
  styrminctl drivers show graphhub@2.0.0 -o yaml`,
		Long: `show prints one driver version of the repository (the newest when no version is
given): its parameters with types, defaults, constraints and docs; its components and
the workloads they select; its services; and the actions of each hook in the order
they run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cat, err := loadRepoCatalog(g)
			if err != nil {
				return err
			}
			name, version, _ := strings.Cut(args[0], "@")
			versions := cat.Versions(name)
			if len(versions) == 0 {
				return fmt.Errorf("driver %s: %w (the repository has: %s)", name, drivers.ErrUnknownDriver, orNone(cat.Names()))
			}
			d := versions[len(versions)-1]
			if version != "" {
				var ok bool
				if d, ok = cat.Get(name, version); !ok {
					var have []string
					for _, v := range versions {
						have = append(have, v.Version)
					}
					return fmt.Errorf("driver %s has no version %s (loaded: %s)", name, version, strings.Join(have, ", "))
				}
			}
			det := detail(d)
			if output != "text" {
				return writeData(stdout, output, det)
			}
			return printDetail(stdout, det)
		},
	}
	addOutputFlag(cmd, &output, dataOutputs()...)
	return cmd
}

func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

func printDetail(w io.Writer, d driverDetail) error {
	fmt.Fprintf(w, "%s %s", d.Name, d.Version)
	if d.Description != "" {
		fmt.Fprintf(w, ": %s", d.Description)
	}
	fmt.Fprintf(w, "\n  app versions: %s\n  digest:       %s\n  source:       %s\n", d.AppVersions, d.Digest, d.Source)

	fmt.Fprintln(w, "\nParameters:")
	if len(d.Parameters) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if len(d.Parameters) > 0 {
		fmt.Fprintln(tw, "  NAME\tTYPE\tDEFAULT\tCONSTRAINT\tDOC")
	}
	for _, p := range d.Parameters {
		def := "(required)"
		switch {
		case p.Sensitive:
			def = "(sensitive)"
		case p.Default != nil:
			b, _ := json.Marshal(p.Default)
			def = string(b)
		case !p.Required:
			def = "(optional)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", p.Name, p.Type, def, p.Constraint, strings.ReplaceAll(p.Doc, "\n", " "))
	}
	tw.Flush()

	fmt.Fprintln(w, "\nComponents:")
	for _, c := range d.Components {
		var sel []string
		for _, wl := range c.Workloads {
			s := wl.Kind
			if wl.Name != "" {
				s += " " + wl.Name
			}
			if len(wl.MatchLabels) > 0 {
				keys := make([]string, 0, len(wl.MatchLabels))
				for k := range wl.MatchLabels {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				var ls []string
				for _, k := range keys {
					ls = append(ls, k+"="+wl.MatchLabels[k])
				}
				s += " {" + strings.Join(ls, ",") + "}"
			}
			sel = append(sel, s)
		}
		fmt.Fprintf(w, "  %s: %s\n", c.Name, strings.Join(sel, "; "))
	}

	fmt.Fprintln(w, "\nServices:")
	if len(d.Services) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, s := range d.Services {
		ing := ""
		if s.Ingress {
			ing = ", ingress"
		}
		fmt.Fprintf(w, "  %s: %s port %d on %s%s\n", s.Name, s.Protocol, s.Port, s.Component, ing)
	}

	fmt.Fprintln(w, "\nActions:")
	for _, hook := range append(drivers.LifecycleHooks(), drivers.OperationHooks()...) {
		h := string(hook)
		if _, ok := d.Actions[h]; !ok {
			continue
		}
		fmt.Fprintf(w, "  %s:\n", h)
		for _, mode := range drivers.ModeNames() {
			for i, s := range d.Actions[h][mode] {
				label := ""
				if i == 0 {
					label = mode + ":"
				}
				fmt.Fprintf(w, "    %-6s %d. %s\n", label, i+1, describeStep(s))
				// A script (sh -c "…" over several lines) reads as
				// written, below its step, not folded into one line.
				if script := multiLine(s.Command); script != nil {
					for _, l := range script {
						fmt.Fprintf(w, "              | %s\n", l)
					}
				}
			}
		}
	}
	if !d.Backup {
		fmt.Fprintln(w, "  backup, restore: not declared: its deployments cannot be backed up")
	}
	return nil
}

func describeStep(s step) string {
	parts := []string{s.Action}
	switch drivers.ActionKind(s.Action) {
	case drivers.ActionBackup:
		parts = append(parts, "(runs the backup hook)")
	case drivers.ActionRestoreBackup:
		parts = append(parts, "(runs the restore hook when the environment is a clone from a backup)")
	}
	if len(s.Components) > 0 {
		parts = append(parts, strings.Join(s.Components, ", "))
	}
	if s.Job != "" {
		parts = append(parts, "job "+s.Job+" from "+s.Component)
	} else if s.Component != "" {
		parts = append(parts, "in "+s.Component)
	}
	if len(s.Command) > 0 {
		if multiLine(s.Command) != nil {
			// The last argument is shown below the step.
			parts = append(parts, "`"+strings.Join(s.Command[:len(s.Command)-1], " ")+" <script>`")
		} else {
			parts = append(parts, "`"+strings.Join(s.Command, " ")+"`")
		}
	}
	if s.Timeout != "" {
		parts = append(parts, "(timeout "+s.Timeout+")")
	}
	return strings.Join(parts, " ")
}

// parseParams reads --param NAME=VALUE flags, each value as YAML.
func parseParams(params []string) (map[string]any, error) {
	set := map[string]any{}
	for _, p := range params {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("--param %q: expected NAME=VALUE", p)
		}
		var x any
		if err := yaml.Unmarshal([]byte(v), &x); err != nil {
			return nil, fmt.Errorf("--param %s: %w", k, err)
		}
		set[k] = x
	}
	return set, nil
}

// lintReport is what `drivers lint` prints.
type lintReport struct {
	driverSummary
	Objects   []lintObject `json:"objects"`
	Manifests string       `json:"manifests,omitempty"`
}

type lintObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	Component  string `json:"component,omitempty"`
}

func newDriversLintCmd(g *globalOptions, stdout io.Writer) *cobra.Command {
	var output string
	var params []string
	var manifests bool
	cmd := &cobra.Command{
		Use:   "lint PATH",
		Short: "Validate a driver version folder and render it with its defaults and a sample context",
		Example: `  styrminctl drivers lint drivers/webapp/1.1.0
  styrminctl drivers lint drivers/graphhub/2.0.0 --param database='{name: db, key: password}' --manifests`,
		Long: `lint loads the driver version folder at PATH (the spec against the schema, the
chart, cross-references) and renders it with a sample context and its parameters'
defaults. Parameters without a default are set with --param NAME=VALUE (the value is
read as YAML: 3, true, "text", {name: db, key: password}).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			// Loading comes first, so a broken folder is reported before
			// a mistyped --param.
			// The repository's styrmin.cue (--repo) sets the limits.
			opts, err := g.driverLoadOptions(os.DirFS(g.Repo))
			if err != nil {
				return err
			}
			opts.Source = filepath.ToSlash(filepath.Clean(dir))
			d, err := drivers.Load(os.DirFS(dir), opts)
			if err != nil {
				return err
			}
			set, err := parseParams(params)
			if err != nil {
				return err
			}
			lint, err := d.Lint(set)
			var pe *drivers.SampleParamsError
			if errors.As(err, &pe) {
				return fmt.Errorf("%w (use --param NAME=VALUE)", err)
			}
			if err != nil {
				return err
			}
			m := lint.Manifests
			rep := lintReport{driverSummary: summarize(d), Objects: []lintObject{}}
			for _, o := range m.Objects {
				rep.Objects = append(rep.Objects, lintObject{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name, Component: o.Component})
			}
			if manifests {
				rep.Manifests = string(m.YAML())
			}
			if output != "text" {
				return writeData(stdout, output, rep)
			}
			fmt.Fprintf(stdout, "%s@%s: ok (%d objects)\n", d.Name, d.Version, len(m.Objects))
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "  KIND\tNAME\tCOMPONENT")
			for _, o := range rep.Objects {
				comp := o.Component
				if comp == "" {
					comp = "-"
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\n", o.Kind, o.Name, comp)
			}
			tw.Flush()
			if manifests {
				_, err = io.WriteString(stdout, rep.Manifests)
			}
			return err
		},
	}
	addOutputFlag(cmd, &output, dataOutputs()...)
	cmd.Flags().StringArrayVarP(&params, "param", "p", nil, "set a parameter for the sample render: NAME=VALUE (repeatable)")
	cmd.Flags().BoolVar(&manifests, "manifests", false, "print the rendered manifests too")
	return cmd
}

// multiLine returns the lines of a command whose last argument is a
// script of several lines (nil otherwise), without the blank ones.
func multiLine(cmd []string) []string {
	if len(cmd) == 0 || !strings.Contains(cmd[len(cmd)-1], "\n") {
		return nil
	}
	var out []string
	for _, l := range strings.Split(cmd[len(cmd)-1], "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
