package testcluster_test

import (
	"os"
	"testing"

	"github.com/go-logr/logr"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

func TestMain(m *testing.M) {
	// envtest logs through controller-runtime's logger; without one set it
	// prints a warning with a stack trace after 30 s.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}
