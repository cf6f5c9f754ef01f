package drivers

import (
	"fmt"
	"path"
	"strings"
)

// LintReport is what Lint found: the driver rendered once with a sample
// context.
type LintReport struct {
	// Driver is the driver linted.
	Driver *Driver
	// Context is the sample context it was rendered with.
	Context Context
	// Manifests are the rendered objects, sorted as the agent applies
	// them, each tagged with its component.
	Manifests *Manifests
}

// SampleParamsError is returned by Lint when the parameters given for the
// sample render are missing or do not satisfy the driver's schema.
type SampleParamsError struct {
	// Source names the driver folder (Driver.Source).
	Source string
	// Err says which parameters and why.
	Err error
}

func (e *SampleParamsError) Error() string { return e.Source + ": " + e.Err.Error() }

func (e *SampleParamsError) Unwrap() error { return e.Err }

// Lint renders the driver as a deployment of it would be, with a sample
// context (SampleContextWith): the parameters set in params, the others at
// their defaults, a sample reference for secrets without one. It computes
// the values and the services' endpoints and renders the chart, so errors
// that Load cannot find without a context (a parameter without a default,
// a template that fails for some values) show up here. Load validates the
// spec; Lint is what `styrminctl drivers lint` runs after it.
func (d *Driver) Lint(params map[string]any) (*LintReport, error) {
	if err := d.chartCRDs(); err != nil {
		return nil, err
	}
	c, err := d.SampleContextWith(params)
	if err != nil {
		return nil, &SampleParamsError{Source: d.Source, Err: err}
	}
	vals, err := d.Values(c)
	if err != nil {
		return nil, err
	}
	if _, err := d.Endpoints(c); err != nil {
		return nil, err
	}
	m, err := d.Render(c, vals)
	if err != nil {
		return nil, err
	}
	return &LintReport{Driver: d, Context: c, Manifests: m}, nil
}

// chartCRDs refuses a chart (or subchart) with files in crds/: a render
// holds its templates only, as Helm's does, and Helm installs crds/ apart,
// at a release's first install only, never upgrading them. Styrmin installs
// them at no time: a driver's CustomResourceDefinitions there were never
// applied (its custom resources failed as of an unknown kind), or, where
// someone had installed them, a new chart version's schema was silently
// never applied. Load accepts such a chart, so that a driver version an
// agent already runs keeps working; lint, which authors run before they
// publish one, says so.
func (d *Driver) chartCRDs() error {
	ch := d.compiled.chart
	if ch == nil {
		return nil
	}
	crds := ch.CRDObjects()
	if len(crds) == 0 {
		return nil
	}
	file := d.compiled.display(path.Join(d.compiled.chartDir, strings.TrimPrefix(crds[0].Filename, ch.Name()+"/")))
	more := ""
	if len(crds) > 1 {
		more = fmt.Sprintf(" (and %d more file(s) in a crds/ folder)", len(crds)-1)
	}
	return &SpecError{File: file, Field: "chart", Msg: "a chart's crds/ folder is neither installed nor upgraded by Styrmin" + more +
		" (Helm itself installs crds/ only at a release's first install, and never upgrades them): move the CustomResourceDefinitions to the chart's templates/," +
		" so that every release applies and upgrades them (the environment's policy must allow the kind CustomResourceDefinition), or install them apart from the chart and remove crds/"}
}
