// Command kwok simulates nodes and pods (sigs.k8s.io/kwok): it is upstream's
// cmd/kwok main, which is not importable as a package.
package main

import (
	"os"

	"github.com/spf13/pflag"
	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/cmd"
	"sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

func main() {
	flags := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flags.ParseErrorsAllowlist.UnknownFlags = true
	flags.Usage = func() {}
	ctx, logger := log.InitFlags(signals.SetupSignalContext(), flags)
	ctx, err := config.InitFlags(ctx, flags)
	if err != nil {
		_, _ = os.Stderr.Write([]byte(flags.FlagUsages()))
		logger.Error("Init config flags", "err", err)
		os.Exit(1)
	}
	command := cmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flags)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("Execute exit", "err", err)
		os.Exit(1)
	}
}
