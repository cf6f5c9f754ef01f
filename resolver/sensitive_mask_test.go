package resolver

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestMaskHidesAValueAsJSONAndGoQuoteWriteIt: a Job that logs its
// configuration as JSON writes & as \u0026, a quote as \", a newline as
// \n (a PEM key): the value as written then was no form Mask knew, and
// left the step's output in clear.
func TestMaskHidesAValueAsJSONAndGoQuoteWriteIt(t *testing.T) {
	const value = "Pa ss/w0rd+x&y\"z\nline two"
	s := Sensitive{"ph": value}
	b, err := json.Marshal(map[string]string{"password": value})
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"json":     string(b),
		"go quote": fmt.Sprintf("password=%q", value),
	} {
		got := s.Mask(text)
		if strings.Contains(got, "w0rd") || !strings.Contains(got, Masked) {
			t.Errorf("%s: %s masked is %s", name, text, got)
		}
	}
}
