package gitsource_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
)

func TestParseHashAcceptsOnlyFullHex(t *testing.T) {
	full := "0123456789abcdef0123456789abcdef01234567"
	tests := []struct {
		in      string
		wantErr string
	}{
		{in: full},
		{in: strings.ToUpper(full)},
		{in: full[:39], wantErr: "want 40 hexadecimal digits"},
		{in: full + "0", wantErr: "want 40 hexadecimal digits"},
		{in: "", wantErr: "want 40 hexadecimal digits"},
		{in: "g" + full[1:], wantErr: "invalid byte"},
	}
	for _, tt := range tests {
		h, err := gitsource.ParseHash(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseHash(%q) error = %v, want %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || h.String() != strings.ToLower(tt.in) {
			t.Errorf("ParseHash(%q) = %s, %v", tt.in, h, err)
		}
	}
}

func TestHashJSONRoundTripsAndZeroIsEmpty(t *testing.T) {
	h, _ := gitsource.ParseHash("0123456789abcdef0123456789abcdef01234567")
	type doc struct {
		A gitsource.Hash `json:"a"`
		B gitsource.Hash `json:"b"`
	}
	b, err := json.Marshal(doc{A: h})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"a":"0123456789abcdef0123456789abcdef01234567","b":""}`; got != want {
		t.Fatalf("json = %s, want %s", got, want)
	}
	var back doc
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.A != h || !back.B.IsZero() {
		t.Fatalf("round trip = %+v", back)
	}
	if err := json.Unmarshal([]byte(`{"a":"xyz"}`), &back); err == nil {
		t.Fatal("a malformed hash unmarshalled without error")
	}
}
