package drivers

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
)

// maxArchiveDepth bounds how deep subchart archives may nest (a chart's
// charts/ holding archives whose charts/ hold archives...).
const maxArchiveDepth = 8

// checkArchives measures the unpacked size of the chart's subchart
// archives before Helm's loader unpacks them. Helm bounds each archive
// (100 MiB) but not their sum nor their nesting, so a small folder of
// archives could unpack to gigabytes; here the whole chart gets one budget
// (Limits.ChartBytes), counted while streaming, so nothing over it is held
// in memory.
func checkArchives(f *folder, chartDir string, l Limits) error {
	budget := l.ChartBytes
	for _, p := range f.paths {
		if !strings.HasPrefix(p, chartDir+"/") || !isArchive(p) {
			continue
		}
		used, err := unpackedSize(f.files[p], budget, 0)
		if err != nil {
			var over *archiveOverError
			if errors.As(err, &over) {
				return &LimitError{Driver: f.source, File: f.display(p), Limit: LimitChart, Max: sizeText(l.ChartBytes),
					Detail: "subchart archives unpack to more than the limit"}
			}
			// Not a readable archive: Helm's loader reports it in its own words.
			continue
		}
		budget -= used
	}
	return nil
}

func isArchive(p string) bool {
	return strings.HasSuffix(p, ".tgz") || strings.HasSuffix(p, ".tar.gz")
}

// archiveOverError is unpackedSize's signal that the budget ran out.
type archiveOverError struct{}

func (*archiveOverError) Error() string { return "archive larger than the budget" }

// unpackedSize returns the bytes data unpacks to, archives inside it
// included, failing with *archiveOverError once more than budget.
func unpackedSize(data []byte, budget int64, depth int) (int64, error) {
	if depth > maxArchiveDepth {
		return 0, &archiveOverError{}
	}
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return 0, err
	}
	defer gz.Close()
	tr := tar.NewReader(gz)
	var used int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return used, nil
		}
		if err != nil {
			return used, err
		}
		// Count every entry Helm's loader (LoadArchiveFiles) reads: all
		// but folders and PAX headers. Skipping what is not TypeReg left
		// a TypeCont or vendor-typed entry, which Helm reads as a file,
		// outside the budget.
		if h.FileInfo().IsDir() || h.Typeflag == tar.TypeXGlobalHeader || h.Typeflag == tar.TypeXHeader {
			continue
		}
		if isArchive(path.Clean(h.Name)) {
			// A nested archive is read (within the budget) and measured
			// in turn: Helm unpacks it too.
			inner, err := io.ReadAll(io.LimitReader(tr, budget-used+1))
			if err != nil {
				return used, err
			}
			used += int64(len(inner))
			if used > budget {
				return used, &archiveOverError{}
			}
			n, err := unpackedSize(inner, budget-used, depth+1)
			used += n
			if err != nil {
				return used, err
			}
			continue
		}
		n, err := io.Copy(io.Discard, io.LimitReader(tr, budget-used+1))
		used += n
		if err != nil {
			return used, fmt.Errorf("reading %s: %w", h.Name, err)
		}
		if used > budget {
			return used, &archiveOverError{}
		}
	}
}
