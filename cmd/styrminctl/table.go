package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// row is one line of a list: its cells, the extra cells of -o wide, what
// -o name prints and what -o json|yaml prints.
type row struct {
	key, name   string
	cells, wide []string
	data        any
}

// table is a list as status, tasks list and history print it.
type table struct {
	header, wide []string
	// wideAt is where the wide columns go (0: after the others).
	wideAt int
	rows   []row
	// empty is printed instead of a table without rows.
	empty string
}

// columns are the cells of one row for output (text or wide).
func (t table) columns(r row, output string) []string {
	if output == outWide {
		return t.withWide(r.cells, r.wide)
	}
	return r.cells
}

func (t table) headerFor(output string) []string {
	if output == outWide {
		return t.withWide(t.header, t.wide)
	}
	return t.header
}

// withWide inserts the wide cells at wideAt.
func (t table) withWide(cells, wide []string) []string {
	at := t.wideAt
	if at <= 0 || at > len(cells) {
		at = len(cells)
	}
	out := append([]string{}, cells[:at]...)
	out = append(out, wide...)
	return append(out, cells[at:]...)
}

// widths are the column widths of the header and every row.
func (t table) widths(output string) []int {
	w := make([]int, len(t.headerFor(output)))
	grow := func(cells []string) {
		for i, c := range cells {
			if i < len(w) {
				w[i] = max(w[i], utf8.RuneCountInString(c))
			}
		}
	}
	grow(t.headerFor(output))
	for _, r := range t.rows {
		grow(t.columns(r, output))
	}
	return w
}

// print writes the whole table in output.
func (t table) print(w io.Writer, output string) error {
	switch output {
	case outJSON, outYAML:
		data := make([]any, 0, len(t.rows))
		for _, r := range t.rows {
			data = append(data, r.data)
		}
		return writeData(w, output, data)
	case outName:
		for _, r := range t.rows {
			if _, err := fmt.Fprintln(w, r.name); err != nil {
				return err
			}
		}
		return nil
	}
	if len(t.rows) == 0 {
		_, err := fmt.Fprintln(w, t.empty)
		return err
	}
	widths := t.widths(output)
	if _, err := io.WriteString(w, formatRow(widths, t.headerFor(output))); err != nil {
		return err
	}
	for _, r := range t.rows {
		if _, err := io.WriteString(w, formatRow(widths, t.columns(r, output))); err != nil {
			return err
		}
	}
	return nil
}

// printRow writes one row alone, as -w prints a change.
func (t table) printRow(w io.Writer, output string, widths []int, r row) error {
	switch output {
	case outJSON, outYAML:
		if output == outYAML {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		return writeData(w, output, r.data)
	case outName:
		_, err := fmt.Fprintln(w, r.name)
		return err
	}
	_, err := io.WriteString(w, formatRow(widths, t.columns(r, output)))
	return err
}

// formatRow pads each cell but the last to its column's width and two
// spaces, as text/tabwriter does.
func formatRow(widths []int, cells []string) string {
	var b strings.Builder
	for i, c := range cells {
		b.WriteString(c)
		if i < len(cells)-1 {
			w := 0
			if i < len(widths) {
				w = widths[i]
			}
			b.WriteString(strings.Repeat(" ", max(0, w-utf8.RuneCountInString(c))+2))
		}
	}
	b.WriteByte('\n')
	return b.String()
}

// watchInterval is how often -w reads the cluster again.
const watchInterval = time.Second

// watchList prints the table read, then, every watchInterval until ctx
// ends, each row that is new or changed (as kubectl get -w does), in the
// columns of the first table; a row gone is printed once more, marked
// deleted.
func watchList(ctx context.Context, w io.Writer, output string, read func(context.Context) (table, error)) error {
	t, err := read(ctx)
	if err != nil {
		return err
	}
	if err := t.print(w, output); err != nil {
		return err
	}
	widths := t.widths(output)
	seen := map[string]string{}
	for _, r := range t.rows {
		seen[r.key] = fingerprint(t, r)
	}
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		next, err := read(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		gone := map[string]bool{}
		for k := range seen {
			gone[k] = true
		}
		for _, r := range next.rows {
			delete(gone, r.key)
			fp := fingerprint(next, r)
			if seen[r.key] == fp {
				continue
			}
			seen[r.key] = fp
			if err := next.printRow(w, output, widths, r); err != nil {
				return err
			}
		}
		for k := range gone {
			delete(seen, k)
			if output == outText || output == outWide || output == outName {
				if _, err := fmt.Fprintf(w, "%s deleted\n", k); err != nil {
					return err
				}
			}
		}
	}
}

// fingerprint is what a row shows in every output, to tell a change.
func fingerprint(t table, r row) string {
	return strings.Join(t.columns(r, outWide), "\x00") + "\x00" + r.name
}
