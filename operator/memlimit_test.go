package operator

import (
	"strings"
	"testing"
	"testing/fstest"
)

func TestSoftMemoryLimitFollowsTheContainer(t *testing.T) {
	v2 := func(s string) fstest.MapFS { return fstest.MapFS{"fs/cgroup/memory.max": {Data: []byte(s)}} }
	v1 := func(s string) fstest.MapFS {
		return fstest.MapFS{"fs/cgroup/memory/memory.limit_in_bytes": {Data: []byte(s)}}
	}
	for _, tc := range []struct {
		name, flag, env string
		sys             fstest.MapFS
		want            int64
		err             string
	}{
		{name: "cgroup v2 limit: 90% of it", sys: v2("268435456\n"), want: 241591910},
		{name: "cgroup v2 without a limit", sys: v2("max\n"), want: 0},
		{name: "cgroup v1 limit", sys: v1("104857600\n"), want: 94371840},
		{name: "cgroup v1 without a limit", sys: v1("9223372036854771712\n"), want: 0},
		{name: "no cgroup file", sys: fstest.MapFS{}, want: 0},
		{name: "the flag wins", flag: "200Mi", sys: v2("268435456"), want: 200 << 20},
		{name: "the flag turns it off", flag: "0", sys: v2("268435456"), want: 0},
		{name: "GOMEMLIMIT is left to the runtime", env: "100MiB", sys: v2("268435456"), want: 0},
		{name: "the flag beats GOMEMLIMIT", flag: "64Mi", env: "100MiB", want: 64 << 20},
		{name: "a bad flag", flag: "lots", err: `--memory-limit: expected a quantity of bytes such as 200Mi, "0" or nothing, got "lots"`},
		{name: "a negative flag", flag: "-5Mi", err: "--memory-limit: expected a quantity"},
		{name: "a bad cgroup file", sys: v2("many"), err: `/sys/fs/cgroup/memory.max: expected a number of bytes or "max", got "many"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := SoftMemoryLimit(tc.flag, tc.env, tc.sys)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("SoftMemoryLimit = %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}

func TestGCPercentIsTheAgentsDefaultUnlessGOGCOrTheFlagSaysOtherwise(t *testing.T) {
	for _, tc := range []struct {
		name, flag, env string
		want            int
		set             bool
		err             string
	}{
		{name: "the agent's default", want: DefaultGCPercent, set: true},
		{name: "GOGC is left to the runtime", env: "200"},
		{name: "the flag", flag: "100", want: 100, set: true},
		{name: "the flag beats GOGC", flag: "25", env: "off", want: 25, set: true},
		{name: "not a number", flag: "half", err: `--gc-percent: expected a whole number from 10 to 1000 (Go's GOGC) or nothing, got "half"`},
		{name: "off is not offered", flag: "off", err: "--gc-percent: expected a whole number"},
		{name: "too low", flag: "5", err: "--gc-percent: expected a whole number"},
		{name: "too high", flag: "5000", err: "--gc-percent: expected a whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, set, err := GCPercent(tc.flag, tc.env)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want || set != tc.set {
				t.Fatalf("GCPercent = %d, %v, %v; want %d, %v", got, set, err, tc.want, tc.set)
			}
		})
	}
}
