package resolver

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/styrmin/styrmin/drivers"
)

// configFunc is the sandbox child's function that evaluates one
// configuration file (SandboxFuncs).
const configFunc = "resolver.config"

// ConfigMemory is the default memory limit of one configuration file's
// evaluation in a ConfigSandbox. The process that asked evaluates the
// file again in-process after the child did, so the limit is also what a
// hostile file can cost it. Real files are a few KiB, but CUE's evaluator
// is not frugal: a deployment file of 1 MiB of small parameter structs
// (the most a Loader reads) needs about 200 MiB; 64 MiB admits one of
// 256 KiB (TestAConfigurationFileOfTheLargestSizeNeedsMoreThanTheDefaultLimit).
const ConfigMemory = 64 << 20

// maxChecked bounds the digests of files a ConfigSandbox remembers as
// evaluated within its limits.
const maxChecked = 1 << 16

// ConfigSandbox bounds the evaluation of a repository's configuration
// files: a Loader given one (WithSandbox) evaluates each file in a sandbox
// child first, under the sandbox's limits, and only then in-process. CUE
// cannot be interrupted and a Go out-of-memory is fatal, while a few
// hundred bytes of CUE can ask for gigabytes; a process that evaluates
// what any author of the repository wrote (the agent) must not be the
// one that pays. Evaluation is deterministic, so the in-process one costs
// what the child measured. A file that hits a limit, or whose evaluation
// ends the child, is a *ConfigError naming it (the limit's *LimitError
// wrapped). Files already evaluated (same name, content and definition)
// are not sent again. Safe for concurrent use.
type ConfigSandbox struct {
	sandbox *drivers.Sandbox
	limits  drivers.Limits

	mu      sync.Mutex
	checked map[[32]byte]struct{}
}

// NewConfigSandbox evaluates configuration files in sb's children under
// limits' time and memory (unset: the drivers' default time,
// ConfigMemory). A nil sb gives nil: a Loader with a nil ConfigSandbox
// evaluates in-process only.
func NewConfigSandbox(sb *drivers.Sandbox, limits drivers.Limits) *ConfigSandbox {
	if sb == nil {
		return nil
	}
	if limits.Memory <= 0 {
		limits.Memory = ConfigMemory
	}
	limits = limits.WithDefaults()
	return &ConfigSandbox{sandbox: sb, limits: limits, checked: map[[32]byte]struct{}{}}
}

// configCall is the input of configFunc.
type configCall struct {
	File string `json:"file"`
	Def  string `json:"def"`
}

// configAnswer is configFunc's output: the evaluation's error as text
// (the parent's in-process evaluation gives it with its type).
type configAnswer struct {
	Error string `json:"error,omitempty"`
}

// SandboxFuncs are the functions a sandbox child serves for a
// ConfigSandbox: a binary whose Sandbox a ConfigSandbox uses passes them
// to drivers.ServeSandbox.
func SandboxFuncs() drivers.SandboxFuncs {
	// A child serves one request at a time; its Loader (the compiled
	// schema) serves them all.
	var l *Loader
	return drivers.SandboxFuncs{configFunc: func(files map[string][]byte, input []byte, phase func(string)) ([]byte, error) {
		var in configCall
		if err := json.Unmarshal(input, &in); err != nil {
			return nil, fmt.Errorf("resolver: bad configuration call: %w", err)
		}
		data, ok := files[in.File]
		if !ok {
			return nil, fmt.Errorf("resolver: configuration call without its file %s", in.File)
		}
		if l == nil {
			l = NewLoader(0)
		}
		phase(in.File)
		// Decoded into any, which reads every field: at least the work
		// of the parent's typed decode.
		var out any
		var ans configAnswer
		if _, err := l.eval(in.File, data, in.Def, &out); err != nil {
			ans.Error = err.Error()
		}
		return json.Marshal(ans)
	}}
}

// check evaluates file in a child unless it was before.
func (c *ConfigSandbox) check(file string, data []byte, def string) error {
	key := configKey(file, data, def)
	c.mu.Lock()
	_, done := c.checked[key]
	c.mu.Unlock()
	if done {
		return nil
	}
	input, err := json.Marshal(configCall{File: file, Def: def})
	if err != nil {
		return err
	}
	out, err := c.sandbox.Call(context.Background(), configFunc, "configuration", file, map[string][]byte{file: data}, input, c.limits)
	if errors.Is(err, drivers.ErrSandboxStart) {
		return fmt.Errorf("%s: %w", file, err) // the machine's, not the file's: retryable
	}
	var le *drivers.LimitError
	if errors.As(err, &le) {
		msg := fmt.Sprintf("evaluating it exceeded the %s limit of %s", le.Limit, le.Max)
		if le.Detail != "" {
			msg += " (" + le.Detail + ")"
		}
		return &ConfigError{File: file, Msg: msg + "; make the file smaller (the agent's --config-memory sets the limit)", Err: le}
	}
	if err != nil {
		return &ConfigError{File: file, Msg: fmt.Sprintf("evaluating it ended its sandbox: %v", err), Err: err}
	}
	var ans configAnswer
	if err := json.Unmarshal(out, &ans); err != nil {
		return &ConfigError{File: file, Msg: fmt.Sprintf("unreadable evaluation in its sandbox: %v", err), Err: err}
	}
	// An evaluation that ended, well or with an error, is bounded: the
	// caller evaluates it in-process for the typed result.
	c.mu.Lock()
	if len(c.checked) >= maxChecked {
		clear(c.checked)
	}
	c.checked[key] = struct{}{}
	c.mu.Unlock()
	return nil
}

// configKey identifies what an evaluation depends on.
func configKey(file string, data []byte, def string) [32]byte {
	h := sha256.New()
	for _, s := range []string{file, def} {
		fmt.Fprintf(h, "%d:%s", len(s), s)
	}
	h.Write(data)
	var k [32]byte
	h.Sum(k[:0])
	return k
}
