package operator

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
)

// The agent's soft memory limit (Go's GOMEMLIMIT) follows its container's
// memory limit: with none, Go lets the heap grow to twice what is live
// before collecting, and a burst (hundreds of releases in one lock commit)
// can take the process past a container limit that its live memory is far
// below. A soft limit under the container's makes the collector work
// harder near it instead.

// memoryLimitShare is the part of the container's limit given to Go's
// heap; the rest is for stacks, the runtime and what Go does not count.
const memoryLimitShare = 0.9

// unlimitedCgroupV1 is what cgroup v1 reports for "no limit" (the largest
// page-aligned int64), or more.
const unlimitedCgroupV1 = int64(1) << 62

// ContainerMemoryLimit reads the memory limit of the process's cgroup from
// sys, the root of the host's /sys (cgroup v2's memory.max, else v1's
// memory.limit_in_bytes). ok is false when there is no limit or no cgroup
// file.
func ContainerMemoryLimit(sys fs.FS) (limit int64, ok bool, err error) {
	for _, p := range []string{"fs/cgroup/memory.max", "fs/cgroup/memory/memory.limit_in_bytes"} {
		raw, err := fs.ReadFile(sys, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("reading the cgroup memory limit: %w", err)
		}
		s := strings.TrimSpace(string(raw))
		if s == "max" {
			return 0, false, nil
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return 0, false, fmt.Errorf("/sys/%s: expected a number of bytes or \"max\", got %q", p, s)
		}
		if n >= unlimitedCgroupV1 {
			return 0, false, nil
		}
		return n, true, nil
	}
	return 0, false, nil
}

// SoftMemoryLimit decides the agent's soft memory limit in bytes (0: none)
// from the --memory-limit flag: "" follows the container (90% of its
// limit; none without one), "0" turns it off, and a quantity ("200Mi")
// sets it. A GOMEMLIMIT in the environment wins over the flag's default.
func SoftMemoryLimit(flag, gomemlimitEnv string, sys fs.FS) (int64, error) {
	switch {
	case flag == "0":
		return 0, nil
	case flag != "":
		q, err := resource.ParseQuantity(flag)
		if err != nil || q.Value() <= 0 {
			return 0, fmt.Errorf("--memory-limit: expected a quantity of bytes such as 200Mi, \"0\" or nothing, got %q", flag)
		}
		return q.Value(), nil
	case gomemlimitEnv != "":
		// The Go runtime has applied it already.
		return 0, nil
	}
	limit, ok, err := ContainerMemoryLimit(sys)
	if err != nil || !ok {
		return 0, err
	}
	return int64(float64(limit) * memoryLimitShare), nil
}

// DefaultGCPercent is the agent's garbage-collection target (Go's GOGC):
// the heap may grow to 1.5 times what is live before a collection, where
// Go's default lets it reach twice. The agent's live heap grows with its
// deployments (caches, kept revisions) and peaks when a lock commit
// starts a fan-out: at 2,000 deployments its peak heap in use was 172–178
// MiB at 100 and 115–131 MiB at 50, with the agent's CPU per deployment
// within the runs' spread at 100 (0.020–0.027 s against 0.018–0.030 s):
// it spends its time waiting for the API server, not collecting.
// docs/agent-performance.md has the runs.
const DefaultGCPercent = 50

// GCPercent decides the agent's garbage-collection target from the
// --gc-percent flag: "" is DefaultGCPercent unless GOGC is set in the
// environment (the runtime applied it already; set is false), and a
// whole number from 10 to 1000 sets it.
func GCPercent(flag, gogcEnv string) (percent int, set bool, err error) {
	if flag == "" {
		if gogcEnv != "" {
			return 0, false, nil
		}
		return DefaultGCPercent, true, nil
	}
	n, err := strconv.Atoi(flag)
	if err != nil || n < 10 || n > 1000 {
		return 0, false, fmt.Errorf("--gc-percent: expected a whole number from 10 to 1000 (Go's GOGC) or nothing, got %q", flag)
	}
	return n, true, nil
}
