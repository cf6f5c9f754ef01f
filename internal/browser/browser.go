package browser

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Attempts is how many times Run starts Chromium before it reports a
// failure: headless Chromium in a container now and then dies of a signal
// as it starts, whatever the page (a segmentation fault before the first
// request), and a test must not fail for that.
const Attempts = 3

// Find returns the path of Debian's chromium (or chromium-browser), ""
// when neither is installed.
func Find() string {
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// Run runs headless Chromium (no sandbox, no GPU, a fresh profile under
// dir for each attempt) with args and returns its stdout and stderr. A
// run that fails is started again, up to Attempts times; the error names
// every attempt's failure.
func Run(ctx context.Context, bin, dir string, args ...string) (stdout, stderr string, err error) {
	var errs []error
	for i := range Attempts {
		profile := filepath.Join(dir, fmt.Sprintf("profile-%d", i))
		if err := os.MkdirAll(profile, 0o755); err != nil {
			return "", "", err
		}
		base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
			"--hide-scrollbars", "--user-data-dir=" + profile, "--enable-logging=stderr", "--v=0"}
		cmd := exec.CommandContext(ctx, bin, append(base, args...)...)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		if err == nil {
			return out.String(), errOut.String(), nil
		}
		errs = append(errs, fmt.Errorf("attempt %d: %w\n%s", i+1, err, lastLines(errOut.String(), 12)))
		if ctx.Err() != nil {
			break
		}
	}
	return "", "", fmt.Errorf("chromium %s: %w", strings.Join(args, " "), errors.Join(errs...))
}

// lastLines is the end of a log.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
