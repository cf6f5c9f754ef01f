// Command hostile writes the hostile driver folders of internal/hostile
// (and a styrmin.cue with the test-sized limits) under a folder, so that
// their cost can be measured with the real binary:
//
//	go run ./hack/hostile /tmp/hostile
//	/usr/bin/time -v styrminctl --repo /tmp/hostile drivers lint /tmp/hostile/drivers/nested-until-template/1.0.0
//
// `make bench-limits` runs that for every case.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/styrmin/styrmin/internal/hostile"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: hostile DIR")
		os.Exit(2)
	}
	if err := write(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "styrmin.cue"), []byte(hostile.Test().CUE()), 0o644); err != nil {
		return err
	}
	for _, c := range append(hostile.Cases(), hostile.OverAgentMemory()) {
		root := filepath.Join(dir, "drivers", c.Name, "1.0.0")
		for p, b := range c.Files(c.Name, "1.0.0") {
			path := filepath.Join(root, filepath.FromSlash(p))
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(path, b, 0o644); err != nil {
				return err
			}
		}
		fmt.Println(root)
	}
	return nil
}
