package daemon

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/launch"
	"github.com/doorman-net/doorman/spec"
)

// The proxy raises its soft descriptor limit to the hard limit.
func TestRaiseNoFile(t *testing.T) {
	var saved unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &saved); err != nil {
		t.Fatal(err)
	}
	if saved.Max < 200 {
		t.Skipf("hard limit %d", saved.Max)
	}
	t.Cleanup(func() { unix.Setrlimit(unix.RLIMIT_NOFILE, &saved) })
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 100, Max: saved.Max}); err != nil {
		t.Fatal(err)
	}
	var now unix.Rlimit
	if got := raiseNoFile(); unix.Getrlimit(unix.RLIMIT_NOFILE, &now) != nil || got != saved.Max || now.Cur != saved.Max {
		t.Errorf("raiseNoFile %d, soft limit now %d; want the hard %d", got, now.Cur, saved.Max)
	}
}

// A connection cap that would not fit in the descriptor limit with the
// reserve is lowered, and the limits line says why; one that fits is
// left alone.
func TestCapsFitTheDescriptorLimit(t *testing.T) {
	c := capsWithin(launch.Config{Proxy: spec.Proxy{Limits: spec.Limits{Connections: 1000}}}, 3000, 28232)
	want := (3000 - fdReserve) / fdsPerConn
	if c.Connections != want || !strings.Contains(c.limitedBy, "3000") {
		t.Errorf("connections %d (%q), want %d, limited by the descriptor limit", c.Connections, c.limitedBy, want)
	}
	if c.Connections*fdsPerConn+fdReserve > 3000 {
		t.Errorf("%d connections and the reserve take more than 3000 descriptors", c.Connections)
	}
	if c.Pending > c.Connections || c.PerUpstream != 28232/spec.DefaultPerUpstreamShare {
		t.Errorf("caps %+v", c)
	}
	if c := capsWithin(launch.Config{Proxy: spec.Proxy{Limits: spec.Limits{Connections: 100}}}, 3000, 0); c.Connections != 100 || c.limitedBy != "" {
		t.Errorf("a cap of 100 in 3000 descriptors: %d (%q)", c.Connections, c.limitedBy)
	}
	// The default fits the hard limit this host's proxies run with.
	if c := capsWithin(launch.Config{}, 20000, 0); c.Connections != spec.DefaultConnections || c.limitedBy != "" {
		t.Errorf("the default cap in 20000 descriptors: %d (%q)", c.Connections, c.limitedBy)
	}
}
