// Command image builds the agent's OCI image (make image): it parses
// flags, wires internal/ociimage and prints the digests. No Docker.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/styrmin/styrmin/internal/ociimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv("SOURCE_DATE_EPOCH"), os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// run builds the image the flags describe; epoch is SOURCE_DATE_EPOCH,
// the creation time when --created is not given.
func run(ctx context.Context, args []string, epoch string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("image", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o ociimage.Options
	var platforms, created string
	fs.StringVar(&o.Name, "name", "styrmin-agent", "the command: its file in the image (/NAME) and the output's names")
	fs.StringVar(&o.Compile.Package, "package", "./cmd/styrmin-agent", "the main package to build")
	fs.StringVar(&o.Compile.Dir, "module", ".", "the module's root folder")
	fs.StringVar(&o.Compile.Go, "go", "go", "the go command that compiles")
	fs.StringVar(&platforms, "platforms", "linux/amd64,linux/arm64", "comma-separated OS/ARCH[/VARIANT] list")
	fs.StringVar(&o.Out, "out", "bin/image", "output folder")
	fs.BoolVar(&o.Archive, "archive", true, "also write the layout as a tar file (skopeo's oci-archive:)")
	fs.StringVar(&o.Metadata.Version, "version", "", "the version stamped into the binary and the image's labels (required)")
	fs.StringVar(&o.Metadata.Revision, "revision", "", "the commit, stamped into the binary and label org.opencontainers.image.revision")
	fs.StringVar(&o.Metadata.Source, "source", "https://github.com/styrmin/styrmin", "the repository's URL (label org.opencontainers.image.source)")
	fs.StringVar(&o.Metadata.Licenses, "licenses", "", `SPDX license expression ("": no label)`)
	fs.StringVar(&created, "created", epoch, "creation time and every file's time, in seconds since 1970 (default $SOURCE_DATE_EPOCH; make passes the commit's time)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.Metadata.Version == "" || created == "" {
		return errors.New("--version and --created (or SOURCE_DATE_EPOCH) are required: an image's digest must not depend on the clock")
	}
	secs, err := strconv.ParseInt(created, 10, 64)
	if err != nil {
		return fmt.Errorf("--created %q: seconds since 1970: %w", created, err)
	}
	o.Metadata.Created = time.Unix(secs, 0).UTC()
	o.Metadata.Title = o.Name
	for _, s := range strings.Split(platforms, ",") {
		p, err := v1.ParsePlatform(strings.TrimSpace(s))
		if err != nil {
			return fmt.Errorf("--platforms: %w", err)
		}
		o.Platforms = append(o.Platforms, *p)
	}
	r, err := ociimage.Build(ctx, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s %s\n", o.Name, o.Metadata.Version)
	fmt.Fprintf(stdout, "  index        %s\n", r.Digest)
	for _, m := range r.Manifests {
		fmt.Fprintf(stdout, "  %-12s %s\n", m.Platform, m.Digest)
	}
	fmt.Fprintf(stdout, "  layout       %s\n", r.Layout)
	if r.Archive != "" {
		fmt.Fprintf(stdout, "  archive      %s\n", r.Archive)
	}
	return nil
}
