package resolver

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/styrmin/styrmin/drivers"
	"github.com/styrmin/styrmin/examples"
)

// The ingress controller's driver, chosen without the selection rule
// (pinned, else locked, else the newest), fails naming a version that does
// not load when that version could be the choice, as Select does, rather
// than another version being taken silently.
func TestAnIngressDriverVersionThatDoesNotLoadFailsTheChoiceItCouldBe(t *testing.T) {
	m := fstest.MapFS{}
	err := fs.WalkDir(examples.Repo(), "drivers/ingress-nginx/1.0.0", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(examples.Repo(), p)
		m[p] = &fstest.MapFile{Data: data}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	m["drivers/ingress-nginx/2.0.0/driver.cue"] = &fstest.MapFile{Data: []byte("name: \"ingress-nginx\"\nversion: \"2.0.0\"\nparameters: {\n")}
	m["drivers/ingress-nginx/0.9.0/driver.cue"] = &fstest.MapFile{Data: []byte("name: \"ingress-nginx\"\nversion: \"0.9.0\"\nparameters: {\n")}
	cat, err := drivers.LoadCatalogKeepGoing(m, "drivers", drivers.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	locked := func(v string) *Instance {
		return &Instance{Kind: KindInstance, Driver: DriverRef{Name: "ingress-nginx", Version: v}}
	}
	for _, c := range []struct {
		name   string
		spec   IngressSpec
		locked *Instance
		want   string // the version chosen, or the broken one named
		broken bool
	}{
		{"the newest loads not: it might be the choice", IngressSpec{Driver: "ingress-nginx"}, nil, "2.0.0", true},
		{"the locked version is kept", IngressSpec{Driver: "ingress-nginx"}, locked("1.0.0"), "1.0.0", false},
		{"the locked version loads not", IngressSpec{Driver: "ingress-nginx"}, locked("0.9.0"), "0.9.0", true},
		{"pinned to one that loads not", IngressSpec{Driver: "ingress-nginx", Version: "2.0.0"}, nil, "2.0.0", true},
		{"pinned to one that loads", IngressSpec{Driver: "ingress-nginx", Version: "1.0.0"}, nil, "1.0.0", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, _, err := selectIngressDriver(&c.spec, c.locked, cat)
			var be *drivers.BrokenDriverError
			if c.broken {
				if !errors.As(err, &be) || be.Version != c.want || !strings.Contains(err.Error(), "drivers/ingress-nginx/"+c.want+"/driver.cue") {
					t.Fatalf("selectIngressDriver = %v, %v; want a BrokenDriverError naming %s and its file", d, err, c.want)
				}
				return
			}
			if err != nil || d.Version != c.want {
				t.Fatalf("selectIngressDriver = %v, %v; want %s", d, err, c.want)
			}
		})
	}
}
