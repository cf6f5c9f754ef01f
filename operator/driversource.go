package operator

import (
	"context"
	"fmt"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/resolver"
)

// DriverSource gives the controller the exact driver version an instance
// was resolved with. The agent backs it with its clone of the
// desired-state repository and the driver repositories; tests with a
// catalog loaded from the examples.
//
// Driver returns a *DriverNotFoundError when the source does not hold the
// version (or holds different content): that needs a change in git. Any
// other error is taken as transient and retried.
type DriverSource interface {
	Driver(ctx context.Context, ref resolver.DriverRef) (*drivers.Driver, error)
}

// DriverNotFoundError reports a driver version the source does not hold,
// or holds with a different digest than the instance pinned.
type DriverNotFoundError struct {
	Ref resolver.DriverRef
	// Digest is the digest of the version found, when it differs.
	Digest string
}

func (e *DriverNotFoundError) Error() string {
	if e.Digest != "" {
		return fmt.Sprintf("driver %s@%s: the instance pins digest %s but the source holds %s", e.Ref.Name, e.Ref.Version, e.Ref.Digest, e.Digest)
	}
	return fmt.Sprintf("driver %s@%s: not found in the driver source", e.Ref.Name, e.Ref.Version)
}

// CatalogSource is a DriverSource over a loaded catalog.
type CatalogSource struct {
	Catalog *drivers.Catalog
}

var _ DriverSource = (*CatalogSource)(nil)

// Driver returns the catalog's version of ref, checking its digest when
// ref pins one.
func (s *CatalogSource) Driver(_ context.Context, ref resolver.DriverRef) (*drivers.Driver, error) {
	d, ok := s.Catalog.Get(ref.Name, ref.Version)
	if !ok {
		return nil, &DriverNotFoundError{Ref: ref}
	}
	if ref.Digest != "" && d.Digest != ref.Digest {
		return nil, &DriverNotFoundError{Ref: ref, Digest: d.Digest}
	}
	return d, nil
}
