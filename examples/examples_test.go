package examples

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteToCopiesEveryFileOfTheRepository(t *testing.T) {
	dir := t.TempDir()
	if err := WriteTo(dir); err != nil {
		t.Fatal(err)
	}
	n := 0
	err := fs.WalkDir(Repo(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		want, _ := fs.ReadFile(Repo(), p)
		got, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil || string(got) != string(want) {
			t.Errorf("%s not copied: %v", p, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"styrmin.cue", "clusters/local/cluster.cue", "drivers/webapp/1.1.0/driver.cue", "drivers/graphhub/2.0.0/chart/Chart.yaml"} {
		if _, err := fs.Stat(Repo(), must); err != nil {
			t.Errorf("the embedded repository lacks %s", must)
		}
	}
	if n < 20 {
		t.Errorf("only %d files embedded", n)
	}
}
