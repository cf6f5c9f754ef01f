package main

import (
	"io"

	"github.com/spf13/cobra"
)

// newDriversCmd builds `styrminctl drivers`.
func newDriversCmd(g *globalOptions, stdout io.Writer) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drivers",
		Short: "List, show and lint application drivers",
	}
	return cmd
}
