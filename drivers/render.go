package drivers

// ApplyParameters unifies params with the driver's parameter schema:
// defaults are filled in and constraints checked. Errors name the
// parameter and what was expected; an unknown parameter is an error.
func (d *Driver) ApplyParameters(params map[string]any) (map[string]any, error) {
	return nil, errNotImplemented
}

// Endpoints computes this deployment's services. It needs only the
// Cluster, Environment and Deployment parts of c.
func (d *Driver) Endpoints(c Context) (map[string]Endpoint, error) {
	return nil, errNotImplemented
}

// Values computes the chart values in CUE from c (whose Parameters are
// already applied).
func (d *Driver) Values(c Context) (map[string]any, error) {
	return nil, errNotImplemented
}

// Render renders the chart with values through the Helm 4 engine (declared
// Kubernetes version and API versions, no cluster), then applies the
// driver's patches.
func (d *Driver) Render(c Context, values map[string]any) (*Manifests, error) {
	return nil, errNotImplemented
}

// Manifests are the rendered objects of one deployment, sorted by kind
// order, group, namespace and name.
type Manifests struct {
	Objects []Object
}

// Object is one rendered Kubernetes object.
type Object struct {
	APIVersion string
	Kind       string
	Namespace  string
	Name       string
	// Component is the driver component the object belongs to ("" for
	// objects shared by the deployment).
	Component string
	// YAML is the object in canonical form (sorted keys).
	YAML []byte
}

// YAML returns all objects as one multi-document stream, byte-identical
// for the same input.
func (m *Manifests) YAML() []byte {
	var n int
	for _, o := range m.Objects {
		n += len(o.YAML) + 4
	}
	out := make([]byte, 0, n)
	for _, o := range m.Objects {
		out = append(out, "---\n"...)
		out = append(out, o.YAML...)
	}
	return out
}
