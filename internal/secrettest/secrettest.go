// Package secrettest finds a secret value in test output in the forms it
// can take on the way: as is, upper-cased, base64-encoded once, twice or
// without padding, URL-encoded. Tests only.
package secrettest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
)

// Forms returns the forms of value a leak could take, by name.
func Forms(value string) map[string]string {
	b64 := base64.StdEncoding.EncodeToString([]byte(value))
	return map[string]string{
		"raw":              value,
		"upper-case":       strings.ToUpper(value),
		"base64":           b64,
		"double base64":    base64.StdEncoding.EncodeToString([]byte(b64)),
		"unpadded base64":  base64.RawStdEncoding.EncodeToString([]byte(value)),
		"base64url":        base64.RawURLEncoding.EncodeToString([]byte(value)),
		"URL-encoded":      url.QueryEscape(value),
		"URL path-encoded": url.PathEscape(value),
	}
}

// MaskForms returns the forms of value that resolver.Sensitive.Mask
// promises to hide, by name: Forms' and lower-cased, base64url padded,
// double base64 unpadded, and as JSON and Go's %q write it (without the
// enclosing quotes). The fuzz tests of every path between a secret and
// the outside look for each.
func MaskForms(value string) map[string]string {
	std := base64.StdEncoding.EncodeToString([]byte(value))
	forms := map[string]string{
		"raw":                 value,
		"upper-case":          strings.ToUpper(value),
		"lower-case":          strings.ToLower(value),
		"base64":              std,
		"unpadded base64":     base64.RawStdEncoding.EncodeToString([]byte(value)),
		"base64url":           base64.URLEncoding.EncodeToString([]byte(value)),
		"unpadded base64url":  base64.RawURLEncoding.EncodeToString([]byte(value)),
		"double base64":       base64.StdEncoding.EncodeToString([]byte(std)),
		"unpadded dbl base64": base64.RawStdEncoding.EncodeToString([]byte(std)),
		"URL query-encoded":   url.QueryEscape(value),
		"URL path-encoded":    url.PathEscape(value),
		"Go-quoted":           strings.TrimSuffix(strings.TrimPrefix(fmt.Sprintf("%q", value), `"`), `"`),
	}
	if j, err := json.Marshal(value); err == nil {
		forms["JSON"] = string(j[1 : len(j)-1])
	}
	return forms
}

// Find returns one line per form of a value of values that data holds
// ("base64 of \"s3cret\""), sorted; none when data is clean.
func Find(data []byte, values ...string) []string {
	var out []string
	for _, v := range values {
		for name, f := range Forms(v) {
			if f != "" && bytes.Contains(data, []byte(f)) {
				out = append(out, fmt.Sprintf("%s of %q", name, v))
			}
		}
	}
	sort.Strings(out)
	return out
}
