package release

import (
	"slices"
	"testing"
)

func TestLostFieldsAreTheExpectedFieldsNoLongerOwned(t *testing.T) {
	t.Parallel()
	const expected = `{"f:metadata":{"f:annotations":{"f:meta.helm.sh/release-name":{}},"f:labels":{"f:app":{}}},` +
		`"f:spec":{"f:replicas":{},"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{},"f:name":{}}}}}}}`
	for _, tc := range []struct {
		name string
		live string
		want []string
	}{
		{"same set", expected, nil},
		{"replicas taken by a scale", `{"f:metadata":{"f:annotations":{"f:meta.helm.sh/release-name":{}},"f:labels":{"f:app":{}}},` +
			`"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{},"f:name":{}}}}}}}`,
			[]string{".spec.replicas"}},
		{"image and a label taken", `{"f:metadata":{"f:annotations":{"f:meta.helm.sh/release-name":{}}},` +
			`"f:spec":{"f:replicas":{},"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:name":{}}}}}}}`,
			[]string{".metadata.labels.app", `.spec.template.spec.containers[name="web"].image`}},
		{"more owned than expected", `{"f:metadata":{"f:annotations":{"f:meta.helm.sh/release-name":{}, "f:x":{}},"f:labels":{"f:app":{}}},` +
			`"f:spec":{"f:replicas":{},"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"web\"}":{".":{},"f:image":{},"f:name":{}}}}}}}`, nil},
		{"nothing owned (manager gone)", ``, []string{".metadata.annotations.meta.helm.sh/release-name", ".metadata.labels.app",
			`.spec.replicas`, `.spec.template.spec.containers[name="web"].image`, `.spec.template.spec.containers[name="web"].name`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := lostFields([]byte(expected), []byte(tc.live))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("lost fields = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLostFieldsRefusesAMalformedFieldSet(t *testing.T) {
	t.Parallel()
	if _, err := lostFields([]byte(`{"f:spec":{}}`), []byte(`{"f:spec":`)); err == nil {
		t.Fatal("no error for a truncated live field set")
	}
}
