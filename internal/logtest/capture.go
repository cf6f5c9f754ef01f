package logtest

import (
	"slices"
	"strings"
	"sync"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// Capture keeps the lines a logger wrote, safe for concurrent use.
type Capture struct {
	mu     sync.Mutex
	errors []string
	infos  []string
}

// New returns a Capture and the logger that writes to it (every
// verbosity up to verbosity).
func New(verbosity int) (*Capture, logr.Logger) {
	c := &Capture{}
	return c, funcr.New(func(_, args string) {
		c.mu.Lock()
		defer c.mu.Unlock()
		if strings.Contains(args, `"error"=`) {
			c.errors = append(c.errors, args)
		} else {
			c.infos = append(c.infos, args)
		}
	}, funcr.Options{Verbosity: verbosity})
}

// Errors are the error lines written so far.
func (c *Capture) Errors() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.errors)
}

// Infos are the other lines written so far.
func (c *Capture) Infos() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.infos)
}
