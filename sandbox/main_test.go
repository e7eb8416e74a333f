package sandbox

import (
	"fmt"
	"os"
	"testing"
)

// TestMain makes this test binary a proxy that fails at once when a
// sandbox starts it as its `doorman supervise` (or `doorman proxy`): the default proxy binary is
// the running executable (a sandbox an older doorman recorded starts it
// too), and a test binary given "proxy ..." must not run the tests again.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "proxy" || os.Args[1] == "supervise") {
		fmt.Fprintf(os.Stderr, "doorman %s: this is the sandbox package's test binary, not a proxy\n", os.Args[1])
		os.Exit(1)
	}
	os.Exit(m.Run())
}
