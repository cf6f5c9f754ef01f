package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/styrmin/styrmin/operator"
	"github.com/styrmin/styrmin/version"
)

func TestFlagsNeedTheClusterAndTheRepository(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"--cluster=local"},
		{"--repo=https://git.example.com/x.git"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil || !strings.Contains(err.Error(), "--cluster and --repo are required") {
			t.Errorf("parseFlags(%q) = %v, want the required flags named", args, err)
		}
	}
	if _, err := parseFlags([]string{"--cluster=a", "--repo=b", "extra"}, io.Discard); err == nil {
		t.Error("a stray argument was accepted")
	}
}

func TestFlagsDefaults(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "agents")
	f, err := parseFlags([]string{"--cluster=local", "--repo=https://git.example.com/x.git", "--repo-secret=creds", "--poll-interval=30s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.namespace != "agents" || f.secretName != "creds" || f.pollInterval != 30*time.Second ||
		f.driftInterval != 5*time.Minute || f.metricsAddr != ":8080" || f.healthAddr != ":8081" || !f.leaderElect || f.stepPause != 0 ||
		f.kubeAPIQPS != operator.DefaultQPS || f.kubeAPIBurst != operator.DefaultBurst || f.keepTasks != operator.DefaultKeepTasks ||
		f.taskConcurrency != operator.DefaultTaskConcurrency || f.deploymentConcurrency != operator.DefaultDeploymentConcurrency {
		t.Errorf("flags: %+v", f)
	}
}

func TestConcurrencyBelowOneIsAnErrorNamingTheFlags(t *testing.T) {
	for _, flag := range []string{"--task-concurrency=0", "--deployment-concurrency=-3"} {
		_, err := parseFlags([]string{"--cluster=a", "--repo=b", flag}, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--task-concurrency") || !strings.Contains(err.Error(), "expected at least 1") {
			t.Errorf("parseFlags(%s) = %v, want an error naming the flags and what they take", flag, err)
		}
	}
	f, err := parseFlags([]string{"--cluster=a", "--repo=b", "--task-concurrency=32", "--deployment-concurrency=48"}, io.Discard)
	if err != nil || f.taskConcurrency != 32 || f.deploymentConcurrency != 48 {
		t.Errorf("parseFlags = %+v, %v", f, err)
	}
}

func TestVersionAndHelpPrintAndSucceedWithoutACluster(t *testing.T) {
	var out, errOut strings.Builder
	if err := run(context.Background(), []string{"--version"}, &out, &errOut); err != nil {
		t.Fatalf("--version: %v", err)
	}
	if want := version.Get().String() + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", out.String(), want)
	}
	out.Reset()
	for _, h := range []string{"--help", "-h"} {
		errOut.Reset()
		if err := run(context.Background(), []string{h}, &out, &errOut); err != nil {
			t.Errorf("%s: %v, want success", h, err)
		}
		if !strings.Contains(errOut.String(), "-health-probe-bind-address") || !strings.Contains(errOut.String(), "-version") {
			t.Errorf("%s printed no usage:\n%s", h, errOut.String())
		}
	}
}

func TestUnknownLogLevelOrFormatIsAnErrorBeforeAnythingRuns(t *testing.T) {
	base := []string{"--cluster=local", "--repo=https://git.example.com/x.git", "--kubeconfig=/nonexistent"}
	for _, c := range []struct{ flag, want string }{
		{"--log-level=verbose", `--log-level "verbose": expected debug, info, warn or error`},
		{"--log-format=xml", `--log-format "xml": expected json or text`},
	} {
		err := run(context.Background(), append(base, c.flag), io.Discard, io.Discard)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.flag, err, c.want)
		}
	}
}

func TestBadMemorySettingsAreAnErrorBeforeAnythingRuns(t *testing.T) {
	base := []string{"--cluster=local", "--repo=https://git.example.com/x.git", "--kubeconfig=/nonexistent"}
	for _, c := range []struct{ flag, want string }{
		{"--gc-percent=half", `--gc-percent: expected a whole number from 10 to 1000 (Go's GOGC) or nothing, got "half"`},
		{"--memory-limit=lots", `--memory-limit: expected a quantity of bytes such as 200Mi, "0" or nothing, got "lots"`},
		{"--driver-fetch-bytes=0", `--driver-fetch-bytes: "0" is not a positive quantity (for example 64Mi)`},
		{"--driver-fetch-bytes=big", `--driver-fetch-bytes: "big" is not a positive quantity (for example 64Mi)`},
	} {
		err := run(context.Background(), append(base, c.flag), io.Discard, io.Discard)
		if err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.flag, err, c.want)
		}
	}
}

func TestLogFormatsWriteJSONOrKeyValueLines(t *testing.T) {
	for format, want := range map[string]string{
		"json": `"msg":"synced","head":"abc"`,
		"text": `msg=synced head=abc`,
	} {
		var buf strings.Builder
		h, err := logHandler(format, "warn", &buf)
		if err != nil {
			t.Fatal(err)
		}
		log := slog.New(h)
		log.Info("hidden below warn")
		log.Warn("synced", "head", "abc")
		if !strings.Contains(buf.String(), want) || strings.Contains(buf.String(), "hidden") {
			t.Errorf("%s: %q, want one line with %s and nothing below warn", format, buf.String(), want)
		}
	}
}
