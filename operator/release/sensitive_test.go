package release

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/resolver"
)

func TestRevealPutsValuesInPlaceOfPlaceholdersAndRefusesChangedOnes(t *testing.T) {
	t.Parallel()
	id := resolver.ID{Cluster: "c", Environment: "e", Name: "d"}
	ph := resolver.Placeholder(id, "token", "s3cr\"et")
	dg, _ := resolver.PlaceholderDigest(ph)
	values := map[string][]byte{dg: []byte("s3cr\"et")}
	b64 := base64.StdEncoding.EncodeToString([]byte("token=" + ph))

	cm := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"},"data":{"url":"https://u:` + ph + `@h","list":["` + ph + `"]}}`
	if !NeedsReveal([]byte(cm)) {
		t.Fatal("NeedsReveal misses a placeholder in a string")
	}
	got, err := Reveal([]byte(cm), values)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"url":"https://u:s3cr\"et@h"`; !strings.Contains(string(got), want) || strings.Contains(string(got), resolver.PlaceholderPrefix) {
		t.Errorf("revealed ConfigMap %s, want %s", got, want)
	}

	secret := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"},"data":{"env":"` + b64 + `"}}`
	if !NeedsReveal([]byte(secret)) {
		t.Fatal("NeedsReveal misses a placeholder in a Secret's data")
	}
	got, err = Reveal([]byte(secret), values)
	if err != nil {
		t.Fatal(err)
	}
	if want := base64.StdEncoding.EncodeToString([]byte("token=s3cr\"et")); !strings.Contains(string(got), want) {
		t.Errorf("revealed Secret %s, want data %s", got, want)
	}

	plain := `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"},"data":{"a":"YWJj"}}`
	if NeedsReveal([]byte(plain)) {
		t.Error("NeedsReveal for a Secret without placeholders")
	}

	for name, body := range map[string]string{
		"upper-cased": `{"kind":"ConfigMap","data":{"a":"` + strings.ToUpper(ph) + `"}}`,
		"cut short":   `{"kind":"ConfigMap","data":{"a":"` + ph[:40] + `"}}`,
		"unknown":     `{"kind":"ConfigMap","data":{"a":"` + resolver.Placeholder(id, "other", "x") + `"}}`,
	} {
		if _, err := Reveal([]byte(body), values); err == nil {
			t.Errorf("%s placeholder: no error", name)
		} else if strings.Contains(err.Error(), "s3cr") {
			t.Errorf("%s placeholder: the error shows the value: %v", name, err)
		}
	}
}
