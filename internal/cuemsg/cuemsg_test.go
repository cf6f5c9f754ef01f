package cuemsg

import (
	"testing"

	"cuelang.org/go/cue"
	"cuelang.org/go/cue/cuecontext"
)

const schemaSrc = `
import "strings"

#Name: =~"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$" & strings.MaxRunes(40)
replicas: *1 | int & >=1 & <=10
size:     *"small" | "medium" | "large"
level:    "debug" | "info" | "warn"
message:  *"hi" | string & !=""
ingress:  *false | bool
ratio:    number & >0 & <1
name:     #Name
driver:   #Name | {name: #Name, version?: string}
`

// TestWantWordsTheFirstBrokenConstraint pins the words for each kind of
// constraint, so no CUE evaluator phrasing reaches users.
func TestWantWordsTheFirstBrokenConstraint(t *testing.T) {
	ctx := cuecontext.New()
	schema := ctx.CompileString(schemaSrc, cue.Filename("schema.cue"))
	if err := schema.Err(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		field, given, want string
	}{
		{"replicas", `50`, "must be at most 10, got 50"},
		{"replicas", `0`, "must be at least 1, got 0"},
		{"replicas", `"two"`, `must be an integer, got "two"`},
		{"replicas", `2.5`, "must be an integer, got 2.5"},
		{"size", `"huge"`, `must be one of "small", "medium", "large", got "huge"`},
		{"level", `"verbose"`, `must be one of "debug", "info", "warn", got "verbose"`},
		{"message", `""`, `must not be empty, got ""`},
		{"ingress", `"yes"`, `must be a bool (true or false), got "yes"`},
		{"ratio", `2`, "must be less than 1, got 2"},
		{"name", `"Web_1"`, `must match the regular expression ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$, got "Web_1"`},
		{"name", `"` + "a123456789a123456789a123456789a123456789z" + `"`, `must be at most 40 characters long, got "a123456789a123456789a123456789a123456789z"`},
		{"driver", `3`, "must be a string or a struct {name, version}, got 3"},
		{"driver", `"Web"`, `must match the regular expression ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$, got "Web"`},
	}
	for _, tc := range tests {
		t.Run(tc.field+"="+tc.given, func(t *testing.T) {
			given := ctx.CompileString(tc.given)
			got := Want(schema.LookupPath(cue.ParsePath(tc.field)), schema, given) + ", got " + Show(given)
			if got != tc.want {
				t.Errorf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}
