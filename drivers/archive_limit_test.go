package drivers

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"testing"
	"testing/fstest"
)

// TestSubchartEntriesOfEveryTypeHelmReadsCountAgainstTheChartLimit pins
// that the unpacked-size limit counts every entry of a subchart archive
// Helm's loader reads (all but folders and PAX headers), not only
// regular files: a gzip bomb stored as a contiguous file ('7') or under a
// vendor type flag, directly or inside a nested archive, fails the load
// with the chart limit.
func TestSubchartEntriesOfEveryTypeHelmReadsCountAgainstTheChartLimit(t *testing.T) {
	const bomb = 8 << 20
	subchart := func(name string, typeflag byte, data []byte, dataName string) []byte {
		var buf bytes.Buffer
		gz, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		tw := tar.NewWriter(gz)
		add := func(p string, flag byte, b []byte) {
			if err := tw.WriteHeader(&tar.Header{Name: name + "/" + p, Mode: 0o644, Size: int64(len(b)), Typeflag: flag}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write(b); err != nil {
				t.Fatal(err)
			}
		}
		add("Chart.yaml", tar.TypeReg, []byte("apiVersion: v2\nname: "+name+"\nversion: 1.0.0\n"))
		add(dataName, typeflag, data)
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		if err := gz.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	zeros := make([]byte, bomb)
	for _, tc := range []struct {
		name    string
		archive []byte
	}{
		{"contiguous file", subchart("bomb", tar.TypeCont, zeros, "files/zero")},
		{"vendor type flag", subchart("bomb", 'Z', zeros, "files/zero")},
		{"contiguous file in a nested archive", subchart("outer", tar.TypeCont, subchart("bomb", tar.TypeCont, zeros, "files/zero"), "charts/bomb.tgz")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fsys := minimalFS()
			fsys["chart/charts/bomb.tgz"] = &fstest.MapFile{Data: tc.archive}
			const source = "drivers/mini/1.0.0"
			_, err := Load(fsys, LoadOptions{Source: source, Limits: Limits{ChartBytes: 1 << 20}})
			var le *LimitError
			if !errors.As(err, &le) || le.Limit != LimitChart || le.File != source+"/chart/charts/bomb.tgz" {
				t.Fatalf("load: %v, want the %s limit error naming %s/chart/charts/bomb.tgz", err, LimitChart, source)
			}
		})
	}
}
