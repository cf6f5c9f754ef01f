package gitsource

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// LockTrailer is the trailer key that records one locked deployment in a
// lock commit: "Styrmin-Lock: <cluster>/<env>/<name>=<sequence>".
const LockTrailer = "Styrmin-Lock"

// Trailer is one "Key: value" line of a commit message's trailer block.
type Trailer struct {
	Key   string
	Value string
}

// ParseTrailers returns the trailer block of a commit message: its last
// paragraph, when that is not the first one and every line of it is a
// "Key: value" line (or a continuation line starting with a space or tab,
// joined to the previous value). Otherwise there are no trailers. Keys are
// returned as written; compare them with strings.EqualFold as git does.
func ParseTrailers(message string) []Trailer {
	lines := strings.Split(strings.ReplaceAll(message, "\r\n", "\n"), "\n")
	// Drop trailing blank lines, then find the last paragraph.
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	start := len(lines)
	for start > 0 && strings.TrimSpace(lines[start-1]) != "" {
		start--
	}
	if start == 0 { // the only paragraph is the subject
		return nil
	}
	var out []Trailer
	for _, line := range lines[start:] {
		if line[0] == ' ' || line[0] == '\t' {
			if len(out) == 0 {
				return nil
			}
			last := &out[len(out)-1]
			last.Value = strings.TrimSpace(last.Value + " " + strings.TrimSpace(line))
			continue
		}
		key, value, ok := strings.Cut(line, ":")
		if !ok || !validTrailerKey(key) {
			return nil
		}
		out = append(out, Trailer{Key: key, Value: strings.TrimSpace(value)})
	}
	return out
}

// validTrailerKey reports whether k is a trailer token: ASCII letters,
// digits and '-', not starting with '-'.
func validTrailerKey(k string) bool {
	if k == "" || k[0] == '-' {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ParseLockTrailers returns the Styrmin-Lock trailers of a commit message as
// deployment key → sequence. A message without them gives an empty map. A
// malformed value or a key given twice is an error naming the line. Readers
// of history that must go on past a bad commit use LockTrailers.
func ParseLockTrailers(message string) (map[string]int, error) {
	locks, bad := LockTrailers(message)
	if len(bad) > 0 {
		return nil, bad[0]
	}
	return locks, nil
}

// LockTrailers is ParseLockTrailers for readers of history: it returns
// every well-formed Styrmin-Lock trailer and one error per trailer it
// skipped, each naming the line. A key given twice keeps its highest
// sequence (the numbers a history has used must never be under-counted)
// and is reported. Trailers are hints written next to the lockfiles, which
// are what counts, so one bad line must not make a commit unreadable: the
// branch could not be synced or locked again until its history was
// rewritten.
func LockTrailers(message string) (map[string]int, []error) {
	out := map[string]int{}
	var bad []error
	for _, t := range ParseTrailers(message) {
		if !strings.EqualFold(t.Key, LockTrailer) {
			continue
		}
		key, seq, err := parseLockValue(t.Value)
		if err != nil {
			bad = append(bad, fmt.Errorf("trailer %q: %w", t.Key+": "+t.Value, err))
			continue
		}
		if prev, dup := out[key]; dup {
			bad = append(bad, fmt.Errorf("trailer %q: deployment %q is locked twice in one commit", t.Key+": "+t.Value, key))
			out[key] = max(prev, seq)
			continue
		}
		out[key] = seq
	}
	return out, bad
}

// parseLockValue parses "<key>=<sequence>".
func parseLockValue(v string) (string, int, error) {
	i := strings.LastIndexByte(v, '=')
	if i < 0 {
		return "", 0, errors.New("want <cluster>/<env>/<name>=<sequence>")
	}
	key, num := v[:i], v[i+1:]
	if err := checkLockKey(key); err != nil {
		return "", 0, err
	}
	seq, err := parseSequence(num)
	if err != nil {
		return "", 0, err
	}
	return key, seq, nil
}

// checkLockKey validates a deployment key in a trailer: non-empty, without
// spaces, control characters or '='.
func checkLockKey(key string) error {
	if key == "" {
		return errors.New("empty deployment key before '='")
	}
	for _, r := range key {
		if r <= ' ' || r == 0x7f || r == '=' || r == '\u00a0' || r == '\ufffd' {
			return fmt.Errorf("deployment key %q contains %q; want <cluster>/<env>/<name>", key, r)
		}
	}
	return nil
}

// maxSequence is the highest sequence an instance may have, 2^53-1 (the
// largest integer every JSON reader holds exactly). It mirrors
// resolver.MaxSequence: gitsource is a leaf and cannot import resolver.
const maxSequence = 1<<53 - 1

// parseSequence parses a canonical non-negative decimal: digits only, no
// sign, no leading zero, at most maxSequence. A larger number is no
// sequence any lock wrote: taken as one, it would become a deployment's
// highest and hide the real one.
func parseSequence(s string) (int, error) {
	if s == "" {
		return 0, errors.New("empty sequence after '='")
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("sequence %q is not a non-negative decimal number", s)
		}
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("sequence %q has a leading zero", s)
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > maxSequence {
		return 0, fmt.Errorf("sequence %q is out of range: the highest is %d", s, maxSequence)
	}
	return n, nil
}

// maxSummaryLocks is how many deployments a generated subject names.
const maxSummaryLocks = 3

// FormatMessage builds a lock commit message:
//
//	styrmin: lock <summary>
//
//	Styrmin-Lock: <key>=<sequence>   (one per lock, sorted by key)
//	<Key>: <value>                   (extra trailers, sorted)
//
// An empty summary is generated from the locks. It is an error for the
// summary to span lines, for a lock key or sequence to be malformed, or for
// an extra trailer to be malformed or to use the Styrmin-Lock key.
func FormatMessage(summary string, locks map[string]int, extra []Trailer) (string, error) {
	if strings.ContainsAny(summary, "\r\n") {
		return "", fmt.Errorf("summary %q spans lines", summary)
	}
	if summary = strings.TrimSpace(summary); summary == "" {
		summary = summarize(slices.Sorted(maps.Keys(locks)), locks)
	}
	subject := "styrmin: lock"
	if summary != "" {
		subject += " " + summary
	}
	return formatMessage(subject, locks, extra)
}

// formatMessage is FormatMessage with the whole subject line given.
func formatMessage(subject string, locks map[string]int, extra []Trailer) (string, error) {
	if strings.ContainsAny(subject, "\r\n") || strings.TrimSpace(subject) == "" {
		return "", fmt.Errorf("subject %q must be one non-empty line", subject)
	}
	keys := slices.Sorted(maps.Keys(locks))
	for _, k := range keys {
		if err := checkLockKey(k); err != nil {
			return "", fmt.Errorf("lock %q: %w", k, err)
		}
		if locks[k] < 0 {
			return "", fmt.Errorf("lock %q: sequence %d is negative", k, locks[k])
		}
		if locks[k] > maxSequence {
			return "", fmt.Errorf("lock %q: sequence %d is out of range: the highest is %d", k, locks[k], maxSequence)
		}
	}
	extra = slices.Clone(extra)
	for _, t := range extra {
		if !validTrailerKey(t.Key) {
			return "", fmt.Errorf("trailer key %q: want letters, digits and '-'", t.Key)
		}
		if strings.EqualFold(t.Key, LockTrailer) {
			return "", fmt.Errorf("trailer %q: record locks in Locks, not as extra trailers", t.Key)
		}
		if strings.TrimSpace(t.Value) == "" || strings.ContainsAny(t.Value, "\r\n") || t.Value != strings.TrimSpace(t.Value) {
			return "", fmt.Errorf("trailer %q: value %q must be one non-empty line without surrounding space", t.Key, t.Value)
		}
	}
	slices.SortFunc(extra, func(a, b Trailer) int {
		return cmp.Or(strings.Compare(a.Key, b.Key), strings.Compare(a.Value, b.Value))
	})

	var b strings.Builder
	b.WriteString(strings.TrimSpace(subject))
	b.WriteString("\n")
	if len(keys)+len(extra) > 0 {
		b.WriteString("\n")
	}
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s=%d\n", LockTrailer, k, locks[k])
	}
	for _, t := range extra {
		fmt.Fprintf(&b, "%s: %s\n", t.Key, t.Value)
	}
	return b.String(), nil
}

func summarize(keys []string, locks map[string]int) string {
	var parts []string
	for i, k := range keys {
		if i == maxSummaryLocks {
			parts[len(parts)-1] += fmt.Sprintf(" and %d more", len(keys)-i)
			break
		}
		parts = append(parts, fmt.Sprintf("%s=%d", k, locks[k]))
	}
	return strings.Join(parts, ", ")
}
