package drivers

import "errors"

// ErrUnknownDriver is returned (wrapped) when a catalog has no version of
// the driver asked for.
var ErrUnknownDriver = errors.New("unknown driver")

var errNotImplemented = errors.New("not implemented yet")
