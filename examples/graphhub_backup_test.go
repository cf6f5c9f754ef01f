package examples

import (
	"bytes"
	"compress/gzip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/drivers"
)

// fakeTools are the programs graphhub's backup and restore jobs call,
// made to act on files: pg_dump writes $FAKE_DUMP (then fails when
// $FAKE_DUMP_FAILS is set, as one whose connection is lost half-way),
// aws s3 cp copies under $FAKE_S3, pg_restore records its arguments and
// what it read. Every call is logged in $FAKE_LOG.
var fakeTools = map[string]string{
	"pg_dump": `#!/bin/sh
echo "pg_dump $*" >> "$FAKE_LOG"
out=""
for a in "$@"; do case "$a" in --file=*) out="${a#--file=}" ;; esac; done
if [ -n "$out" ]; then printf '%s' "$FAKE_DUMP" > "$out"; else printf '%s' "$FAKE_DUMP"; fi
if [ -n "${FAKE_DUMP_FAILS:-}" ]; then echo "pg_dump: error: connection lost" >&2; exit 1; fi
`,
	"aws": `#!/bin/sh
echo "aws $*" >> "$FAKE_LOG"
src="$3"; dst="$4"
case "$src" in s3://*) src="$FAKE_S3/${src#s3://}" ;; esac
case "$dst" in s3://*) dst="$FAKE_S3/${dst#s3://}"; mkdir -p "$(dirname "$dst")" ;; esac
cp "$src" "$dst"
`,
	"pg_restore": `#!/bin/sh
echo "pg_restore $*" >> "$FAKE_LOG"
in=""
for a in "$@"; do case "$a" in -*) ;; *) in="$a" ;; esac; done
if [ -n "$in" ] && [ -f "$in" ]; then cat "$in" > "$FAKE_RESTORED"; else cat > "$FAKE_RESTORED"; fi
`,
}

type jobRun struct {
	dir, s3, log, restored string
	env                    []string
}

func newJobRun(t *testing.T) *jobRun {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	j := &jobRun{dir: dir, s3: filepath.Join(dir, "s3"), log: filepath.Join(dir, "calls"), restored: filepath.Join(dir, "restored")}
	for _, d := range []string{bin, j.s3, filepath.Join(dir, "tmp")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, script := range fakeTools {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	j.env = []string{"PATH=" + bin + ":" + os.Getenv("PATH"), "TMPDIR=" + filepath.Join(dir, "tmp"),
		"FAKE_LOG=" + j.log, "FAKE_S3=" + j.s3, "FAKE_RESTORED=" + j.restored,
		"GRAPHHUB_DATABASE_PASSWORD=pw", "GRAPHHUB_DATABASE_HOST=db", "GRAPHHUB_DATABASE_PORT=5432", "STYRMIN_BACKUP_ID=nightly-1"}
	return j
}

func (j *jobRun) run(t *testing.T, command []string, env ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Dir = j.dir
	cmd.Env = append(append([]string{}, j.env...), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (j *jobRun) calls() string {
	b, _ := os.ReadFile(j.log)
	return string(b)
}

func hookCommand(t *testing.T, d *drivers.Driver, hook drivers.Hook) []string {
	t.Helper()
	for _, s := range d.Hooks[hook].Core {
		if s.Action == drivers.ActionRunJob {
			return s.Command
		}
	}
	t.Fatalf("%s@%s: no runJob step in the %s hook's core", d.Name, d.Version, hook)
	return nil
}

func gzipped(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	if _, err := w.Write([]byte(s)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestGraphhubBackupAndRestoreJobsFailRatherThanKeepOrLoadAPartialDump
// runs graphhub's backup and restore commands against stand-ins of
// pg_dump, aws and pg_restore. The backup piped pg_dump into gzip under
// sh, which has no pipefail: a pg_dump that failed half-way (its
// connection lost, a migration's lock) left gzip's success, and a
// truncated dump was uploaded and recorded as a backup that succeeded,
// found out only by the restore that read it. The restore piped gunzip
// into pg_restore --clean outside a transaction: a truncated artefact
// dropped the database's tables and loaded part of it, and the restore
// failing half-way left it so. The backup now fails and uploads nothing;
// the restore checks the whole artefact before it touches the database,
// and loads it in one transaction.
func TestGraphhubBackupAndRestoreJobsFailRatherThanKeepOrLoadAPartialDump(t *testing.T) {
	cat, err := drivers.LoadCatalog(Repo(), "drivers", drivers.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const dump = "PGDMP the whole database"
	for _, v := range []string{"1.0.0", "2.0.0"} {
		d, ok := cat.Get("graphhub", v)
		if !ok {
			t.Fatalf("no graphhub@%s", v)
		}
		backup, restore := hookCommand(t, d, drivers.HookBackup), hookCommand(t, d, drivers.HookRestore)
		t.Run(v+"/backup whose pg_dump fails half-way", func(t *testing.T) {
			j := newJobRun(t)
			out, err := j.run(t, backup, "FAKE_DUMP=PGDMP half", "FAKE_DUMP_FAILS=1", "STYRMIN_BACKUP_LOCATION=s3://backups/local/dev/nightly-1/hub")
			if err == nil {
				t.Errorf("the backup succeeded though pg_dump failed:\n%s", out)
			}
			if strings.Contains(j.calls(), "aws") {
				t.Errorf("a dump pg_dump did not finish was uploaded:\n%s", j.calls())
			}
		})
		t.Run(v+"/backup", func(t *testing.T) {
			j := newJobRun(t)
			out, err := j.run(t, backup, "FAKE_DUMP="+dump, "STYRMIN_BACKUP_LOCATION=s3://backups/local/dev/nightly-1/hub")
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			z, err := os.ReadFile(filepath.Join(j.s3, "backups/local/dev/nightly-1/hub/database.dump.gz"))
			if err != nil {
				t.Fatal(err)
			}
			r, err := gzip.NewReader(bytes.NewReader(z))
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if _, err := got.ReadFrom(r); err != nil || got.String() != dump {
				t.Errorf("artefact holds %q (%v), want %q", got.String(), err, dump)
			}
			if !strings.Contains(out, "styrmin-backup-size=") {
				t.Errorf("no size line:\n%s", out)
			}
		})
		t.Run(v+"/restore of a truncated artefact", func(t *testing.T) {
			j := newJobRun(t)
			z := gzipped(t, strings.Repeat(dump, 200))
			art := filepath.Join(j.s3, "backups/local/dev/nightly-1/hub/database.dump.gz")
			if err := os.MkdirAll(filepath.Dir(art), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(art, z[:len(z)/2], 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := j.run(t, restore, "STYRMIN_RESTORE_FROM=s3://backups/local/dev/nightly-1/hub")
			if err == nil {
				t.Errorf("the restore of a truncated artefact succeeded:\n%s", out)
			}
			if strings.Contains(j.calls(), "pg_restore") {
				t.Errorf("pg_restore ran on a truncated artefact:\n%s", j.calls())
			}
		})
		t.Run(v+"/restore", func(t *testing.T) {
			j := newJobRun(t)
			art := filepath.Join(j.s3, "backups/local/dev/nightly-1/hub/database.dump.gz")
			if err := os.MkdirAll(filepath.Dir(art), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(art, gzipped(t, dump), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := j.run(t, restore, "STYRMIN_RESTORE_FROM=s3://backups/local/dev/nightly-1/hub")
			if err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			if got, _ := os.ReadFile(j.restored); string(got) != dump {
				t.Errorf("pg_restore read %q, want %q", got, dump)
			}
			if !strings.Contains(j.calls(), "--single-transaction") {
				t.Errorf("pg_restore does not restore in one transaction:\n%s", j.calls())
			}
		})
	}
}
