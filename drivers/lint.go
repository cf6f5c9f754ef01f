package drivers

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
