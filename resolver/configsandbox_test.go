package resolver

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"runtime/metrics"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/styrmin/styrmin/drivers"
)

// cueBomb is a configuration file of about 500 bytes whose evaluation
// allocates 2^(n+5) bytes of strings (n=22: 512 MiB), each let twice the
// one before; the comprehension makes CUE evaluate the last.
func cueBomb(n int) string {
	var b strings.Builder
	b.WriteString("let s0 = \"0123456789abcdef\"\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "let s%d = s%d + s%d\n", i, i-1, i-1)
	}
	fmt.Fprintf(&b, "if len(s%d) < 0 {\n\tdeletionThreshold: 1\n}\n", n)
	return b.String()
}

// allocated is how many bytes this process has allocated so far.
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func newConfigSandbox(t *testing.T, limits drivers.Limits) (*ConfigSandbox, *drivers.Sandbox) {
	t.Helper()
	sb, err := drivers.SelfSandbox(2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Close)
	return NewConfigSandbox(sb, limits), sb
}

// TestAConfigurationFileThatWouldExhaustMemoryFailsInTheSandboxNamingIt:
// with a ConfigSandbox, a 500-byte styrmin.cue whose evaluation asks for
// 512 MiB stops at the sandbox's memory limit, as a ConfigError naming the
// file and the limit, and this process never evaluates it (it allocates
// a few MiB, not the file's hundreds).
func TestAConfigurationFileThatWouldExhaustMemoryFailsInTheSandboxNamingIt(t *testing.T) {
	cs, _ := newConfigSandbox(t, drivers.Limits{Memory: 48 << 20, Timeout: 30 * time.Second})
	fsys := fstest.MapFS{"styrmin.cue": {Data: []byte(cueBomb(22))}}

	before := allocated()
	_, err := NewLoader(0).WithSandbox(cs).LoadSettings(fsys)
	spent := allocated() - before

	var ce *ConfigError
	if !errors.As(err, &ce) || ce.File != "styrmin.cue" || !errors.Is(err, drivers.ErrLimit) ||
		!strings.Contains(err.Error(), "memory limit of 48 MiB") {
		t.Fatalf("got %v, want a ConfigError naming styrmin.cue and the 48 MiB memory limit", err)
	}
	if spent > 32<<20 {
		t.Errorf("this process allocated %d MiB while the sandbox evaluated the file: it evaluated it itself", spent>>20)
	}
	t.Logf("error: %v (this process allocated %.1f MiB)", err, float64(spent)/(1<<20))
}

// TestAConfigurationFileThatLoopsFailsAtTheSandboxsTimeLimit: a file
// whose evaluation takes longer than the time limit is stopped there,
// named, instead of holding its caller.
func TestAConfigurationFileThatLoopsFailsAtTheSandboxsTimeLimit(t *testing.T) {
	cs, _ := newConfigSandbox(t, drivers.Limits{Memory: 64 << 20, Timeout: 2 * time.Second})
	// Quadratic in CUE's evaluator, small in memory.
	src := "import \"list\"\nlet n = [for i in list.Range(0, 4000, 1) for j in list.Range(0, 4000, 1) if i*j < 0 {i}]\nif len(n) > 0 {\n\tdeletionThreshold: 1\n}\n"
	fsys := fstest.MapFS{"styrmin.cue": {Data: []byte(src)}}
	start := time.Now()
	_, err := NewLoader(0).WithSandbox(cs).LoadSettings(fsys)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.File != "styrmin.cue" || !strings.Contains(err.Error(), "time limit of 2s") {
		t.Fatalf("got %v after %v, want a ConfigError naming styrmin.cue and the 2s time limit", err, time.Since(start))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the evaluation was stopped after %v, want about 2s", d)
	}
}

// TestTheSandboxedLoaderGivesWhatTheInProcessOneGives: the sandbox changes
// nothing a Loader returns for files within the limits, the errors with
// their line, column and field included; and a file evaluated once is
// not sent to a child again.
func TestTheSandboxedLoaderGivesWhatTheInProcessOneGives(t *testing.T) {
	cs, sb := newConfigSandbox(t, drivers.Limits{})
	for _, tc := range []struct {
		name string
		fsys fs.FS
	}{
		{"the example repository", os.DirFS(exampleCopy(t))},
		{"a field of the wrong type", fstest.MapFS{"styrmin.cue": {Data: []byte("deletionThreshold: \"ten\"\n")}}},
		{"a syntax error", fstest.MapFS{"styrmin.cue": {Data: []byte("deletionThreshold: {\n")}}},
		{"YAML", fstest.MapFS{"styrmin.yaml": {Data: []byte("deletionThreshold: [1\n")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantErr := NewLoader(0).Load(tc.fsys)
			got, gotErr := NewLoader(0).WithSandbox(cs).Load(tc.fsys)
			if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
				t.Fatalf("with the sandbox: %v\nin-process: %v", gotErr, wantErr)
			}
			var wce, gce *ConfigError
			if errors.As(wantErr, &wce) != errors.As(gotErr, &gce) ||
				(wce != nil && (wce.File != gce.File || wce.Line != gce.Line || wce.Column != gce.Column || wce.Field != gce.Field)) {
				t.Fatalf("with the sandbox the error is %#v, in-process %#v", gce, wce)
			}
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("with the sandbox the repository differs")
			}
			sent := sb.Requests()
			if _, err := NewLoader(0).WithSandbox(cs).Load(tc.fsys); fmt.Sprint(err) != fmt.Sprint(wantErr) {
				t.Fatalf("again: %v", err)
			}
			if n := sb.Requests() - sent; n != 0 {
				t.Errorf("loading the same files again sent %d evaluations to the sandbox, want none", n)
			}
		})
	}
}

// TestAConfigurationFileOfTheLargestSizeNeedsMoreThanTheDefaultLimit
// pins what ConfigMemory's comment says: a deployment file of the largest
// size a Loader reads (DefaultMaxFileSize of small parameter structs, CUE
// and YAML) evaluates within a limit an operator can set (384 MiB) and
// not within ConfigMemory, where it
// is refused naming the file; one of 256 KiB evaluates within it.
func TestAConfigurationFileOfTheLargestSizeNeedsMoreThanTheDefaultLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("evaluates 1 MiB files (about 15 s)")
	}
	file := func(size int, yaml bool) string {
		var b strings.Builder
		if yaml {
			b.WriteString("driver: webapp\nappVersion: 1.0.0\nparameters:\n")
		} else {
			b.WriteString("driver: \"webapp\"\nappVersion: \"1.0.0\"\nparameters: {\n")
		}
		for i := 0; b.Len() < size-64; i++ {
			if yaml {
				fmt.Fprintf(&b, "  p%06d: {name: n%06d, list: [1, 2, 3], on: true}\n", i, i)
			} else {
				fmt.Fprintf(&b, "\tp%06d: {name: \"n%06d\", list: [1, 2, 3], on: true}\n", i, i)
			}
		}
		if !yaml {
			b.WriteString("}\n")
		}
		return b.String()
	}
	id := ID{Cluster: "c", Environment: "e", Name: "d"}
	parse := func(cs *ConfigSandbox, name, data string) error {
		_, err := NewLoader(0).WithSandbox(cs).parseDeployment("clusters/c/environments/e/deployments/"+name, []byte(data), id)
		return err
	}
	def, _ := newConfigSandbox(t, drivers.Limits{})
	// 256 MiB held it on an idle machine; a loaded one (its collector
	// starved) reached 257: the point is that it fits a limit an operator
	// can set, not the default.
	large, _ := newConfigSandbox(t, drivers.Limits{Memory: 384 << 20})
	for _, yaml := range []bool{false, true} {
		name := map[bool]string{false: "d.cue", true: "d.yaml"}[yaml]
		big := file(DefaultMaxFileSize, yaml)
		if len(big) > DefaultMaxFileSize {
			t.Fatalf("%s is %d bytes, over the limit", name, len(big))
		}
		if err := parse(large, name, big); err != nil {
			t.Errorf("%s of %d bytes within 384 MiB: %v", name, len(big), err)
		}
		var ce *ConfigError
		if err := parse(def, name, big); !errors.As(err, &ce) || !errors.Is(err, drivers.ErrLimit) || !strings.Contains(ce.File, name) {
			t.Errorf("%s of %d bytes within ConfigMemory: got %v, want the memory limit naming the file", name, len(big), err)
		}
		if err := parse(def, name, file(256<<10, yaml)); err != nil {
			t.Errorf("%s of 256 KiB within ConfigMemory: %v", name, err)
		}
	}
}

// BenchmarkLoadWithConfigSandbox loads the configuration of 1,000
// deployments (Loader.Load) in-process, with a new ConfigSandbox (every
// file sent to a child: an agent's first lock in lock mode) and with one
// that has seen the files (its next locks).
func BenchmarkLoadWithConfigSandbox(b *testing.B) {
	fsys := os.DirFS(generateRepo(b, 1000, 20))
	sb, err := drivers.SelfSandbox(2)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(sb.Close)
	load := func(b *testing.B, cs func() *ConfigSandbox) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := NewLoader(0).WithSandbox(cs()).Load(fsys); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("in-process", func(b *testing.B) { load(b, func() *ConfigSandbox { return nil }) })
	b.Run("sandbox-new", func(b *testing.B) { load(b, func() *ConfigSandbox { return NewConfigSandbox(sb, drivers.Limits{}) }) })
	seen := NewConfigSandbox(sb, drivers.Limits{})
	if _, err := NewLoader(0).WithSandbox(seen).Load(fsys); err != nil {
		b.Fatal(err)
	}
	b.Run("sandbox-seen", func(b *testing.B) { load(b, func() *ConfigSandbox { return seen }) })
}
