package gitsource_test

import (
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/gitsource"
)

func TestParseTrailersTakesOnlyAFinalTrailerParagraph(t *testing.T) {
	tests := []struct {
		name string
		msg  string
		want []gitsource.Trailer
	}{
		{"subject only", "Styrmin-Lock: a=1\n", nil},
		{"trailer block", "subject\n\nbody\n\nA: 1\nB-c: two words\n", []gitsource.Trailer{{"A", "1"}, {"B-c", "two words"}}},
		{"crlf and trailing blank lines", "subject\r\n\r\nA: 1\r\n\r\n\r\n", []gitsource.Trailer{{"A", "1"}}},
		{"continuation line", "s\n\nA: one\n  two\n", []gitsource.Trailer{{"A", "one two"}}},
		{"prose in last paragraph", "s\n\nA: 1\nthis is prose\n", nil},
		{"trailer in middle paragraph", "s\n\nA: 1\n\nprose\n", nil},
		{"key with space", "s\n\nNot a key: 1\n", nil},
		{"continuation first", "s\n\n  A: 1\n", nil},
		{"empty", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := gitsource.ParseTrailers(tt.msg); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseTrailers = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestParseLockTrailers(t *testing.T) {
	tests := []struct {
		name    string
		msg     string
		want    map[string]int
		wantErr string
	}{
		{"none", "fix typo\n", map[string]int{}, ""},
		{"two locks and another trailer", "styrmin: lock\n\nStyrmin-Lock: c/e/a=3\nstyrmin-lock: c/e/b=10\nSigned-off-by: x\n", map[string]int{"c/e/a": 3, "c/e/b": 10}, ""},
		{"zero", "s\n\nStyrmin-Lock: c/e/a=0\n", map[string]int{"c/e/a": 0}, ""},
		{"missing equals", "s\n\nStyrmin-Lock: c/e/a\n", nil, "want <cluster>/<env>/<name>=<sequence>"},
		{"negative", "s\n\nStyrmin-Lock: c/e/a=-1\n", nil, "not a non-negative decimal"},
		{"leading zero", "s\n\nStyrmin-Lock: c/e/a=01\n", nil, "leading zero"},
		{"empty key", "s\n\nStyrmin-Lock: =1\n", nil, "empty deployment key"},
		{"space in key", "s\n\nStyrmin-Lock: c/e a=1\n", nil, "contains ' '"},
		{"overflow", "s\n\nStyrmin-Lock: c/e/a=99999999999999999999999\n", nil, "out of range"},
		{"above the highest sequence", "s\n\nStyrmin-Lock: c/e/a=9007199254740992\n", nil, "out of range"},
		{"the highest sequence", "s\n\nStyrmin-Lock: c/e/a=9007199254740991\n", map[string]int{"c/e/a": 1<<53 - 1}, ""},
		{"duplicate", "s\n\nStyrmin-Lock: c/e/a=1\nStyrmin-Lock: c/e/a=2\n", nil, "locked twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := gitsource.ParseLockTrailers(tt.msg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !maps.Equal(got, tt.want) {
				t.Fatalf("ParseLockTrailers = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestFormatMessage(t *testing.T) {
	tests := []struct {
		name    string
		summary string
		locks   map[string]int
		extra   []gitsource.Trailer
		want    string
		wantErr string
	}{
		{
			name:  "generated summary, sorted trailers",
			locks: map[string]int{"c/e/b": 2, "c/e/a": 7},
			extra: []gitsource.Trailer{{"Styrmin-Source", "abc"}, {"Reviewed-by", "x"}},
			want:  "styrmin: lock c/e/a=7, c/e/b=2\n\nStyrmin-Lock: c/e/a=7\nStyrmin-Lock: c/e/b=2\nReviewed-by: x\nStyrmin-Source: abc\n",
		},
		{
			name:  "long summary is shortened",
			locks: map[string]int{"c/e/a": 1, "c/e/b": 1, "c/e/c": 1, "c/e/d": 1, "c/e/e": 1},
			want:  "styrmin: lock c/e/a=1, c/e/b=1, c/e/c=1 and 2 more\n\nStyrmin-Lock: c/e/a=1\nStyrmin-Lock: c/e/b=1\nStyrmin-Lock: c/e/c=1\nStyrmin-Lock: c/e/d=1\nStyrmin-Lock: c/e/e=1\n",
		},
		{name: "explicit summary", summary: "fan-out of cluster c", locks: map[string]int{"c/e/a": 1}, want: "styrmin: lock fan-out of cluster c\n\nStyrmin-Lock: c/e/a=1\n"},
		{name: "nothing", want: "styrmin: lock\n"},
		{name: "multi-line summary", summary: "a\nb", wantErr: "spans lines"},
		{name: "bad key", locks: map[string]int{"c/e/a=b": 1}, wantErr: "contains '='"},
		{name: "negative", locks: map[string]int{"c/e/a": -1}, wantErr: "negative"},
		{name: "above the highest sequence", locks: map[string]int{"c/e/a": 1 << 53}, wantErr: "out of range"},
		{name: "lock as extra", extra: []gitsource.Trailer{{"styrmin-lock", "c/e/a=1"}}, wantErr: "record locks in Locks"},
		{name: "bad extra key", extra: []gitsource.Trailer{{"Bad Key", "v"}}, wantErr: "want letters, digits"},
		{name: "multi-line extra", extra: []gitsource.Trailer{{"K", "a\nb"}}, wantErr: "one non-empty line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := gitsource.FormatMessage(tt.summary, tt.locks, tt.extra)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("FormatMessage =\n%q, %v\nwant\n%q", got, err, tt.want)
			}
			back, err := gitsource.ParseLockTrailers(got)
			if err != nil || (len(tt.locks) > 0 && !maps.Equal(back, tt.locks)) {
				t.Fatalf("ParseLockTrailers(FormatMessage) = %v, %v; want %v", back, err, tt.locks)
			}
		})
	}
}

func TestLockTrailersKeepTheGoodAndReportTheBad(t *testing.T) {
	msg := "s\n\nStyrmin-Lock: c/e/a=x\nStyrmin-Lock: c/e/b=2\nStyrmin-Lock: c/e/c=1\nStyrmin-Lock: c/e/c=5\n"
	got, bad := gitsource.LockTrailers(msg)
	if want := map[string]int{"c/e/b": 2, "c/e/c": 5}; !maps.Equal(got, want) {
		t.Fatalf("LockTrailers = %v, want %v", got, want)
	}
	if len(bad) != 2 || !strings.Contains(bad[0].Error(), `c/e/a=x`) || !strings.Contains(bad[1].Error(), "locked twice") {
		t.Fatalf("bad = %v, want the malformed value and the duplicate named", bad)
	}
}

// FuzzParseLockTrailers checks that the parser never panics, that what it
// accepts is well formed, and that formatting what it parsed parses back to
// the same locks.
func FuzzParseLockTrailers(f *testing.F) {
	for _, seed := range []string{
		"styrmin: lock c/e/a=1\n\nStyrmin-Lock: c/e/a=1\n",
		"s\n\nStyrmin-Lock: c/e/a=1\nStyrmin-Lock: c/e/b=2\nOther: x\n",
		"s\n\nStyrmin-Lock: c/e/a=01\n",
		"s\r\n\r\nstyrmin-lock:  x=0 \r\n  continued\r\n",
		"s\n\nStyrmin-Lock: ==\n",
		"s\n\n\n\nA: b\n\n",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, msg string) {
		locks, err := gitsource.ParseLockTrailers(msg)
		if err != nil {
			return
		}
		for k, v := range locks {
			if k == "" || strings.ContainsAny(k, "= \t\r\n") || v < 0 {
				t.Fatalf("accepted malformed lock %q=%d from %q", k, v, msg)
			}
		}
		formatted, err := gitsource.FormatMessage("", locks, nil)
		if err != nil {
			t.Fatalf("FormatMessage of parsed locks %v: %v", locks, err)
		}
		back, err := gitsource.ParseLockTrailers(formatted)
		if err != nil || !maps.Equal(back, locks) {
			t.Fatalf("round trip of %v via %q = %v, %v", locks, formatted, back, err)
		}
	})
}
