package drivers

import (
	"io/fs"

	"github.com/Masterminds/semver/v3"
)

// LoadOptions tune Load.
type LoadOptions struct {
	// Source names where the folder comes from, for messages and
	// Driver.Source (for example "drivers/webapp/1.0.0").
	Source string
	// MaxFileSize is the largest file accepted, in bytes (default 1 MiB).
	MaxFileSize int64
}

// Load loads and validates one driver version from fsys, which is rooted
// at the driver version's folder.
func Load(fsys fs.FS, opts LoadOptions) (*Driver, error) {
	return nil, errNotImplemented
}

func (d *Driver) supports(app *semver.Version) bool {
	return d.compiled != nil && d.compiled.appRange != nil && d.compiled.appRange.Check(app)
}
