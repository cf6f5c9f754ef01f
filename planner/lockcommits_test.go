package planner

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/styrmin/styrmin/resolver"
)

// TestLockCommitsAreInTheSchemaAndTheirSubjectsStayOneLine: the lock
// commits a plan lists validate against plan.schema.json, a create, a
// delete and a change among them, and a commit's subject (an author's
// text) reaches the text and markdown plans with no control character.
func TestLockCommitsAreInTheSchemaAndTheirSubjectsStayOneLine(t *testing.T) {
	base := lockedExample(t)
	head := copyTree(t, base)
	scenarios[0].change(t, head)
	scenarios[2].change(t, head)
	scenarios[3].change(t, head)
	in := loadInput(t, base, head)
	changes, err := resolver.PlanLocks(in.Head, in.Base)
	if err != nil {
		t.Fatal(err)
	}
	p := computePlan(t, base, head, Options{AllowDeletions: 5})
	p.UnlockedCommits = 2
	p.LockCommits = []LockCommit{
		NewLockCommit(strings.Repeat("a", 40), "first\x1b[2K\r::error::forged", changes[:1]),
		NewLockCommit(strings.Repeat("b", 40), "second", changes[1:]),
	}
	var buf bytes.Buffer
	if err := RenderJSON(&buf, p); err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	if err := planSchema(t).Validate(m); err != nil {
		t.Errorf("a plan with lock commits does not validate: %v", err)
	}
	for name, render := range map[string]func(*bytes.Buffer) error{
		"text":     func(b *bytes.Buffer) error { return RenderText(b, p, RenderOptions{}) },
		"markdown": func(b *bytes.Buffer) error { return RenderMarkdown(b, p, RenderOptions{}) },
	} {
		var b bytes.Buffer
		if err := render(&b); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if strings.ContainsAny(out, "\x1b\r") || !strings.Contains(out, `first\x1b[2K\r::error::forged`) || !strings.Contains(out, "Lock commits") {
			t.Errorf("%s: want the lock commits listed, the subject escaped:\n%s", name, out)
		}
	}
}
