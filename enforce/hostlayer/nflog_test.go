package hostlayer

import (
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/doorman-net/doorman/proxy/droplog"
	"github.com/doorman-net/doorman/proxy/droplog/nflog"
)

// logReader is a sandbox's NFLOG group, bound in the lab's runtime
// namespace.
type logReader struct {
	c     *nflog.Conn
	key   string
	group uint16
}

func (l *lab) openLog(t *testing.T, key string) *logReader {
	t.Helper()
	g, err := ReadLogGroup(l.runtime.path, key)
	if err != nil {
		t.Fatal(err)
	}
	var c *nflog.Conn
	in(t, l.runtime, func() error {
		c, err = nflog.Open(g)
		return err
	})
	t.Cleanup(func() { c.Close() })
	return &logReader{c: c, key: key, group: g}
}

// logged is one packet a group got, read as the proxy reads it.
type logged struct {
	table, rule string
	flow        droplog.Flow
}

// read returns what the group gets within d, its rules named by their
// marks.
func (r *logReader) read(t *testing.T, l *lab, d time.Duration) []logged {
	t.Helper()
	drops, err := ReadDrops(l.runtime.path, r.key)
	if err != nil {
		t.Fatal(err)
	}
	var out []logged
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		got, err := r.c.Receive(end)
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("group %d: %v", r.group, err)
		}
		for _, p := range got {
			if p.Group != r.group {
				t.Errorf("group %d got a packet of group %d", r.group, p.Group)
			}
			lg := logged{table: p.Prefix}
			for _, d := range drops {
				if d.Table == p.Prefix && d.Mark == p.Mark {
					lg.rule = d.Rule
				}
			}
			if lg.flow, err = droplog.ParseFlow(p.HWProto, p.Payload); err != nil {
				t.Errorf("group %d: %v", r.group, err)
			}
			out = append(out, lg)
		}
	}
	return out
}

func find(got []logged, rule, src, dst string) bool {
	for _, g := range got {
		if g.rule == rule && g.flow.Src.String() == src && fmt.Sprintf("%s:%d", g.flow.Dst, g.flow.DstPort) == dst {
			return true
		}
	}
	return false
}

// TestDropsAreLogged: what the layer drops is logged to the NFLOG group of
// the sandbox that sent it, with its addresses, ports and the rule that
// dropped it (by its mark), from a bridge port and a routed interface; a
// flood is logged at most LogBurst + LogRate a second while the counter
// holds every packet; and a flooding sandbox takes nothing from its
// neighbour's log.
func TestDropsAreLogged(t *testing.T) {
	requireRoot(t)
	t.Parallel()
	l := newLab(t)
	l.apply(t, l.spec(t, "ctr-a", l.a, "veth-a", false))
	l.apply(t, l.spec(t, "ctr-c", l.c, "veth-c", false))
	ra, rc := l.openLog(t, "ctr-a"), l.openLog(t, "ctr-c")
	if ra.group == rc.group {
		t.Fatalf("two sandboxes share nflog group %d", ra.group)
	}
	const udp = "udp not to a resolver is dropped"
	other := hostPort(inet4, 5353)

	n0 := l.dropCount(t, "ctr-a", "table inet", udp)
	sendUDP(t, l.a, other, "from-a")
	got := ra.read(t, l, 500*time.Millisecond)
	if !find(got, udp, sbxA4, other) {
		t.Errorf("a's udp to %s: group %d got %+v (counter %d -> %d)", other, ra.group, got, n0, l.dropCount(t, "ctr-a", "table inet", udp))
	}
	if got := rc.read(t, l, 100*time.Millisecond); len(got) != 0 {
		t.Errorf("c's group got a's drops: %+v", got)
	}

	// A spoofed source, on the bridge and on the routed interface.
	l.a.ip(t, "addr add 198.51.100.11/25 dev eth0")
	sendUDPFrom(t, l.a, "198.51.100.11", other, []byte("spoofed"))
	if got := ra.read(t, l, 500*time.Millisecond); !find(got, "ipv4 not from the sandbox's addresses is dropped", "198.51.100.11", other) {
		t.Errorf("a's spoofed udp: group %d got %+v", ra.group, got)
	}
	l.c.ip(t, "addr add 198.51.100.77/25 dev eth0")
	sendUDPFrom(t, l.c, "198.51.100.77", other, []byte("spoofed"))
	rule := fmt.Sprintf("ipv4 from veth-c (index %d) not from the sandbox's addresses [%s] is dropped", l.runtime.link(t, "veth-c").Index, sbxC4)
	if got := rc.read(t, l, 500*time.Millisecond); !find(got, rule, "198.51.100.77", other) {
		t.Errorf("c's spoofed udp: group %d got %+v", rc.group, got)
	}

	// A flood from c: the counter takes all of it, the log a bounded
	// part, and a's drops are still logged.
	before := l.dropCount(t, "ctr-c", "table inet", udp)
	const flood = 2000
	start := time.Now()
	in(t, l.c, func() error {
		c, err := net.Dial("udp", other)
		if err != nil {
			return err
		}
		defer c.Close()
		for range flood {
			if _, err := c.Write([]byte("flood")); err != nil {
				return err
			}
		}
		return nil
	})
	sendUDP(t, l.a, other, "from-a-during-the-flood")
	gotC := rc.read(t, l, time.Second)
	elapsed := time.Since(start)
	t.Logf("a flood of %d datagrams over %v: %d logged", flood, elapsed, len(gotC))
	if n := l.dropCount(t, "ctr-c", "table inet", udp) - before; n != flood {
		t.Errorf("the counter of c's udp drops rose by %d, want %d", n, flood)
	}
	if limit := LogBurst + int(elapsed.Seconds()*LogRate) + 2; len(gotC) > limit || len(gotC) < LogBurst/2 {
		t.Errorf("a flood of %d over %v: %d packets logged, want at most %d (and some)", flood, elapsed, len(gotC), limit)
	}
	if got := ra.read(t, l, 300*time.Millisecond); !find(got, udp, sbxA4, other) {
		t.Errorf("a's udp during c's flood was not logged: %+v", got)
	}
}
