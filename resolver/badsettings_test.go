package resolver

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
)

// TestBothSettingsFilesAreRefusedNotIgnored pins that styrmin.cue next to
// styrmin.yaml is a ConfigError naming the duplicate, from every reader
// of the settings. Ignored, it dropped every repository setting (rollout
// waves, the deletion threshold, driver limits and sources) and hid the
// errors of the file the user edits: styrmin.cue below is itself invalid.
func TestBothSettingsFilesAreRefusedNotIgnored(t *testing.T) {
	fsys := fstest.MapFS{
		"styrmin.cue":  {Data: []byte("deletionThreshold: 1\nlimits: timeout: \"banana\"\n")},
		"styrmin.yaml": {Data: []byte("{}\n")},
	}
	check := func(t *testing.T, err error) {
		t.Helper()
		var ce *ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("err = %v, want a *ConfigError", err)
		}
		if ce.File != "styrmin.yaml" || !strings.Contains(ce.Msg, "duplicate of styrmin.cue") {
			t.Fatalf("err = %v, want styrmin.yaml named as a duplicate of styrmin.cue", err)
		}
	}
	t.Run("Load", func(t *testing.T) {
		repo, err := NewLoader(0).Load(fsys)
		check(t, err)
		if repo != nil {
			t.Errorf("Load returned a repository with the error")
		}
	})
	t.Run("LoadSettings", func(t *testing.T) {
		_, err := NewLoader(0).LoadSettings(fsys)
		check(t, err)
	})
	t.Run("DriverLimits", func(t *testing.T) {
		_, err := NewLoader(0).DriverLimits(fsys)
		check(t, err)
	})
}

// TestASettingsFileNextToALinkIsRefused: a styrmin.yaml that is a
// symbolic link, next to a styrmin.cue, is a duplicate as well; neither
// is read.
func TestASettingsFileNextToALinkIsRefused(t *testing.T) {
	fsys := fstest.MapFS{
		"styrmin.cue":  {Data: []byte("deletionThreshold: 1\n")},
		"styrmin.yaml": {Data: []byte("/etc/passwd"), Mode: fs.ModeSymlink},
	}
	_, err := NewLoader(0).Load(fsys)
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.File != "styrmin.yaml" || !strings.Contains(ce.Msg, "duplicate of styrmin.cue") {
		t.Fatalf("err = %v, want styrmin.yaml named as a duplicate of styrmin.cue", err)
	}
}

// TestNoSettingsFileIsNoSettings pins the one case the settings readers
// still pass over: a repository without styrmin.cue or styrmin.yaml has
// none, and that is no error.
func TestNoSettingsFileIsNoSettings(t *testing.T) {
	fsys := fstest.MapFS{"clusters/.keep": {Data: nil}}
	s, err := NewLoader(0).LoadSettings(fsys)
	if err != nil {
		t.Fatalf("LoadSettings: %v", err)
	}
	if s.DeletionThreshold != nil {
		t.Errorf("settings from no file: %+v", s)
	}
	if _, err := NewLoader(0).Load(fsys); err != nil {
		t.Fatalf("Load: %v", err)
	}
}

// TestTheSettingsFileIsStillRead guards the fix against ignoring the file
// it should read: alone, styrmin.cue's errors are reported.
func TestTheSettingsFileIsStillRead(t *testing.T) {
	fsys := fstest.MapFS{"styrmin.cue": {Data: []byte("limits: timeout: \"banana\"\n")}}
	_, err := NewLoader(0).DriverLimits(fsys)
	if err == nil || !strings.Contains(err.Error(), "styrmin.cue") || !strings.Contains(err.Error(), "banana") {
		t.Fatalf("err = %v, want styrmin.cue's bad timeout", err)
	}
}

// TestARepositoryOfBothSettingsFilesIsNamedNotTakenForNone: a folder
// holding styrmin.cue and styrmin.yaml (and nothing else yet) was "not a
// desired-state repository"; the duplicate is the error to fix.
func TestARepositoryOfBothSettingsFilesIsNamedNotTakenForNone(t *testing.T) {
	fsys := fstest.MapFS{"styrmin.cue": {Data: []byte("deletionThreshold: 1\n")}, "styrmin.yaml": {Data: []byte("{}\n")}}
	err := CheckRepository(fsys)
	if err == nil || errors.Is(err, ErrNotRepository) || !strings.Contains(err.Error(), "duplicate") {
		t.Fatalf("CheckRepository: %v, want the duplicate named", err)
	}
	if err := CheckRepository(fstest.MapFS{"styrmin.cue": {Data: []byte("deletionThreshold: 1\n")}}); err != nil {
		t.Fatalf("a repository of styrmin.cue alone: %v", err)
	}
}

// TestNumbersPastWhatTheyAreReadIntoNameTheFieldAndWhatWasExpected: an
// integer past 64 bits, and a YAML number CUE cannot read (.inf, .nan, an
// integer past 64 bits), are refused naming the file, the field and what
// was expected. Before, CUE's decoding gave an error with no field and no
// words ("styrmin.cue:1:1: "), and a YAML number it could not read was
// "required, not set" where the user had set it. So are the numbers of
// cluster.cue's ingress: past what 64 bits hold: they are read through
// JSON, and 1e400 was taken as the string "1e+400", an integer past 64
// bits as a float rounded, both without a word.
func TestNumbersPastWhatTheyAreReadIntoNameTheFieldAndWhatWasExpected(t *testing.T) {
	const (
		big         = "100000000000000000000000000000"
		env         = "clusters/c/environments/e/environment.cue"
		envYAML     = "clusters/c/environments/e/environment.yaml"
		deployYAML  = "clusters/c/environments/e/deployments/d.yaml"
		cluster     = "clusters/c/cluster.cue"
		clusterYAML = "clusters/c/cluster.yaml"
		ingress     = "domain: \"c.example\"\ningressClass: \"nginx\"\ningress: {driver: \"ingress-nginx\", "
	)
	for _, c := range []struct {
		file, text, field, want string
	}{
		{"styrmin.cue", "deletionThreshold: " + big + "\n", "deletionThreshold", "must be at most 9223372036854775807"},
		{"styrmin.cue", "limits: memory: " + big + "\n", "limits.memory", "must be at most 9223372036854775807"},
		{"styrmin.cue", "limits: chartBytes: " + big + "\n", "limits.chartBytes", "must be at most 9223372036854775807"},
		{env, "backupLocation: \"s3://bucket/p\"\nbackups: keep: " + big + "\n", "backups.keep", "must be at most 9223372036854775807"},
		{envYAML, "backupLocation: s3://bucket/p\nbackups:\n  keep: 99999999999999999999\n", "backups.keep", "expected a finite number within 64 bits"},
		{envYAML, "backupLocation: s3://bucket/p\nbackups:\n  keep: .inf\n", "backups.keep", "expected a finite number within 64 bits"},
		{envYAML, "rollout:\n  waves: -.inf\n", "rollout.waves", "expected a finite number within 64 bits"},
		{deployYAML, "driver: webapp\nappVersion: 1.0.0\nparameters:\n  replicas: .nan\n", "parameters.replicas", "expected a finite number within 64 bits"},
		// An ingress block is read through JSON: 1e400 became the string
		// "1e+400", an integer past 64 bits a rounded float.
		{cluster, ingress + "parameters: x: 1e400}\n", "ingress.parameters.x", "expected a finite number within 64 bits"},
		{cluster, ingress + "parameters: x: -1e-400}\n", "ingress.parameters.x", "expected a finite number within 64 bits"},
		{cluster, ingress + "parameters: {ok: 1.5, x: y: [1, " + big + "]}}\n", "ingress.parameters.x.y[1]", "expected a finite number within 64 bits"},
		{clusterYAML, "domain: c.example\ningressClass: nginx\ningress:\n  driver: ingress-nginx\n  parameters:\n    x: 1e-400\n", "ingress.parameters.x", "expected a finite number within 64 bits"},
		{clusterYAML, "domain: c.example\ningressClass: nginx\ningress:\n  driver: ingress-nginx\n  parameters:\n    x: " + big + "\n", "ingress.parameters.x", "expected a finite number within 64 bits"},
		{clusterYAML, "domain: c.example\ningressClass: nginx\ningress:\n  driver: ingress-nginx\n  parameters:\n    x: .inf\n", "ingress.parameters.x", "expected a finite number within 64 bits"},
	} {
		t.Run(c.file+" "+c.field, func(t *testing.T) {
			fsys := fstest.MapFS{
				"clusters/c/cluster.cue": {Data: []byte("domain: \"c.example\"\n")},
				env:                      {Data: []byte("\n")},
				"clusters/c/environments/e/deployments/d.cue": {Data: []byte("driver: \"webapp\"\nappVersion: \"1.0.0\"\n")},
			}
			switch c.file {
			case envYAML:
				delete(fsys, env)
			case deployYAML:
				delete(fsys, "clusters/c/environments/e/deployments/d.cue")
			case clusterYAML:
				delete(fsys, cluster)
			}
			fsys[c.file] = &fstest.MapFile{Data: []byte(c.text)}
			_, err := NewLoader(0).Load(fsys)
			var ce *ConfigError
			if !errors.As(err, &ce) || ce.File != c.file || ce.Field != c.field || !strings.Contains(ce.Msg, c.want) || ce.Line == 0 {
				t.Fatalf("err = %v, want %s:LINE: field %s: …%s…", err, c.file, c.field, c.want)
			}
		})
	}
}
