package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"
)

// The -o values. A command accepts those that make sense for it: every
// command with structured output text, json and yaml; plans markdown;
// lists (status, tasks list, history) wide and name.
const (
	outText     = "text"
	outJSON     = "json"
	outYAML     = "yaml"
	outMarkdown = "markdown"
	outWide     = "wide"
	outName     = "name"
)

// dataOutputs are the -o values of a command with structured output.
func dataOutputs() []string { return []string{outText, outJSON, outYAML} }

// listOutputs are the -o values of a command that prints a list.
func listOutputs() []string { return []string{outText, outWide, outName, outJSON, outYAML} }

// outputValue is -o: a value outside accepted is a flag error listing
// the accepted ones.
type outputValue struct {
	value    *string
	accepted []string
}

func (v *outputValue) String() string { return *v.value }
func (v *outputValue) Type() string   { return "format" }

func (v *outputValue) Set(s string) error {
	if !slices.Contains(v.accepted, s) {
		return fmt.Errorf("unknown output format %q (accepted: %s)", s, strings.Join(v.accepted, ", "))
	}
	*v.value = s
	return nil
}

// addOutputFlag registers -o/--output (default text) taking the accepted
// values, and completes them.
func addOutputFlag(cmd *cobra.Command, output *string, accepted ...string) {
	*output = outText
	cmd.Flags().VarP(&outputValue{value: output, accepted: accepted}, "output", "o", "output format: "+strings.Join(accepted, ", "))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(accepted, cobra.ShellCompDirectiveNoFileComp))
}

// writeData prints v as indented JSON (with <, > and & as they are) or
// as YAML (through its JSON form, so both use the same field names).
func writeData(w io.Writer, output string, v any) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	b := buf.Bytes()
	if output == outYAML {
		var err error
		if b, err = yaml.JSONToYAML(b); err != nil {
			return err
		}
	}
	_, err := w.Write(b)
	return err
}
