package instance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/operator/api/v1alpha1"
	"github.com/styrmin/styrmin/resolver"
)

// SpecFromInstance returns the StyrminDeployment spec that carries in.
func SpecFromInstance(in *resolver.Instance) (v1alpha1.StyrminDeploymentSpec, error) {
	if in == nil {
		return v1alpha1.StyrminDeploymentSpec{}, errors.New("instance is nil")
	}
	spec := v1alpha1.StyrminDeploymentSpec{
		Kind:         in.Kind,
		Deployment:   DeploymentID(in.ID),
		Sequence:     in.Sequence,
		SourceCommit: in.SourceCommit,
		Digest:       in.Digest,
		Driver:       v1alpha1.DriverRef{Name: in.Driver.Name, Version: in.Driver.Version, Digest: in.Driver.Digest},
		AppVersion:   in.AppVersion,
		Internal:     in.Internal,
		BackupFirst:  in.BackupFirst,
	}
	if o := in.Driver.Source; o != nil {
		spec.DriverSource = &v1alpha1.DriverSource{URL: o.URL, Ref: o.Ref, Path: o.Path, Commit: o.Commit}
	}
	if spec.Kind == "" {
		spec.Kind = v1alpha1.KindInstance
	}
	var err error
	if in.Context != nil {
		if spec.Context, err = toJSON(in.Context); err != nil {
			return spec, fmt.Errorf("instance %s: context: %w", in.ID, err)
		}
	}
	if in.Values != nil {
		if spec.Values, err = toJSON(in.Values); err != nil {
			return spec, fmt.Errorf("instance %s: values: %w", in.ID, err)
		}
	}
	return spec, nil
}

// InstanceFromSpec returns the instance a StyrminDeployment spec carries.
// It checks that the spec's content still hashes to its digest, so a spec
// edited by hand is refused rather than applied.
func InstanceFromSpec(spec *v1alpha1.StyrminDeploymentSpec) (*resolver.Instance, error) {
	in := &resolver.Instance{
		APIVersion:   resolver.APIVersion,
		Kind:         spec.Kind,
		ID:           ResolverID(spec.Deployment),
		Sequence:     spec.Sequence,
		SourceCommit: spec.SourceCommit,
		Digest:       spec.Digest,
		Driver:       resolver.DriverRef{Name: spec.Driver.Name, Version: spec.Driver.Version, Digest: spec.Driver.Digest},
		AppVersion:   spec.AppVersion,
		Internal:     spec.Internal,
		BackupFirst:  spec.BackupFirst,
	}
	if o := spec.DriverSource; o != nil {
		in.Driver.Source = &resolver.DriverOrigin{URL: o.URL, Ref: o.Ref, Path: o.Path, Commit: o.Commit}
	}
	if in.Kind == "" {
		in.Kind = resolver.KindInstance
	}
	if spec.Context != nil && len(spec.Context.Raw) > 0 {
		var c drivers.Context
		if err := strictUnmarshal(spec.Context.Raw, &c); err != nil {
			return nil, fmt.Errorf("spec.context: %w", err)
		}
		in.Context = &c
	}
	if spec.Values != nil && len(spec.Values.Raw) > 0 {
		if err := json.Unmarshal(spec.Values.Raw, &in.Values); err != nil {
			return nil, fmt.Errorf("spec.values: expected an object: %w", err)
		}
	}
	if !in.Tombstone() && in.Context == nil {
		return nil, errors.New("spec.context: missing (an Instance needs its resolved context)")
	}
	sum, err := in.ComputeDigest()
	if err != nil {
		return nil, err
	}
	if sum != spec.Digest {
		return nil, fmt.Errorf("spec.digest: is %s but the spec's content hashes to %s: the spec was changed outside of styrmin; lock a new instance in git instead", spec.Digest, sum)
	}
	return in, nil
}

func toJSON(v any) (*apiextensionsv1.JSON, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return &apiextensionsv1.JSON{Raw: b}, nil
}

func strictUnmarshal(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
