package runner

import (
	"os"
	"testing"
)

// TestMain makes the test binary a run's init when Start starts it as one.
func TestMain(m *testing.M) {
	if os.Args[0] == InitArg0 {
		os.Exit(Init())
	}
	os.Exit(m.Run())
}
