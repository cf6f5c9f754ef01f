package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/styrmin/styrmin/operator"
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
		f.kubeAPIQPS != operator.DefaultQPS || f.kubeAPIBurst != operator.DefaultBurst || f.keepTasks != operator.DefaultKeepTasks {
		t.Errorf("flags: %+v", f)
	}
}
