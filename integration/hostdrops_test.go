package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/enforce/hostlayer"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/droplog"
	"github.com/doorman-net/doorman/sandbox"
)

// hostDropLine matches the connection line of one packet the host-side
// layer dropped, with its reason, protocol and destination.
func hostDropLine(reason, proto, dst string) func(map[string]any) bool {
	return func(d map[string]any) bool {
		return d["msg"] == "connection" && d["verdict"] == "deny" && d["reason"] == reason && d["proto"] == proto && d["dst"] == dst
	}
}

// hostDropTotals adds up what c's log says the host-side layer dropped,
// by reason: its packet lines and its denials lines; and how many packets
// were logged one by one: the packet lines, and their repeats that the
// log's aggregator counted in its denials lines (those name the
// destination; the counters' denials lines do not).
func (e *cniEnv) hostDropTotals(c *container) (total map[string]int, packets int) {
	total = map[string]int{}
	for _, d := range e.allDecisions(c) {
		reason, _ := d["reason"].(string)
		if !strings.HasPrefix(reason, droplog.ReasonPrefix) || d["verdict"] != "deny" {
			continue
		}
		switch d["msg"] {
		case "connection":
			total[reason]++
			packets++
		case "denials":
			n, _ := d["count"].(float64)
			total[reason] += int(n)
			if d["dst"] != "" {
				packets += int(n)
			}
		}
	}
	return total, packets
}

// findDecision waits up to d for a line of c's log that pred accepts.
func (e *cniEnv) findDecision(c *container, pred func(map[string]any) bool, d time.Duration) map[string]any {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		for _, m := range e.decisions(c) {
			if pred(m) {
				return m
			}
		}
	}
	return nil
}

// allDecisions returns c's connection and denials lines.
func (e *cniEnv) allDecisions(c *container) []map[string]any {
	data, _ := os.ReadFile(filepath.Join(e.logDir, c.key+".log"))
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && (m["msg"] == "connection" || m["msg"] == "denials") {
			out = append(out, m)
		}
	}
	return out
}

// hostDropCounter is what the host-side layer's counters of c's rule say
// it dropped, by reason.
func (e *cniEnv) hostDropCounter(c *container, reason string) int {
	e.t.Helper()
	drops, err := hostlayer.ReadDrops(e.net.HostNS().Path(), c.key)
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, d := range drops {
		if droplog.Reason(d.Rule) == reason {
			n += int(d.Packets)
		}
	}
	return n
}

// waitTotalsAddUp waits until the lines of reason in c's log add up to
// the layer's counter, and returns that count.
func (e *cniEnv) waitTotalsAddUp(c *container, reason string) int {
	e.t.Helper()
	// The log's aggregator writes the repeats of a packet line at the
	// end of its interval.
	deadline := time.Now().Add(decisionlog.DefaultInterval + 3*droplog.DefaultInterval)
	for {
		want := e.hostDropCounter(c, reason)
		total, _ := e.hostDropTotals(c)
		if total[reason] == want && want > 0 {
			return want
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: the log's lines add up to %d, the counter says %d", reason, total[reason], want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// checkHostDropLogging is what every kind of workload must see of the
// host-side layer's log: the packet line of a datagram it sent with the
// sandbox's id, its address and the destination; a flood logged as a
// bounded number of packet lines whose totals with the denials lines are
// the counter's; and a restarted proxy that does not log the same drops
// again. send sends n datagrams to dst from the sandbox.
func checkHostDropLogging(t *testing.T, e *cniEnv, c *container, send func(n int)) {
	t.Helper()
	const reason = "host-layer: udp not to a resolver"
	st := e.state(c)
	dst := netip.AddrPortFrom(evilAddr4, testnet.PortUDPEcho).String()
	var d map[string]any
	for range 5 { // the layer may be applied after the proxy bound its group: until then it only counts
		send(1)
		if d = e.findDecision(c, hostDropLine(reason, "udp", dst), time.Second); d != nil {
			break
		}
	}
	if d == nil {
		e.t.Fatalf("no packet line of %s to %s", reason, dst)
	}
	client, err := netip.ParseAddrPort(fmt.Sprint(d["client"]))
	if err != nil || d["sandbox"] != st.ID || !slices.ContainsFunc(st.Pins, func(p sandbox.Pin) bool { return slices.Contains(p.Addrs, client.Addr()) }) {
		t.Errorf("packet line %v: want sandbox %s and a client address of the sandbox's (%v)", d, st.ID, err)
	}

	// A flood: a bounded number of packet lines, totals that are the
	// counter's.
	_, before := e.hostDropTotals(c)
	start := time.Now()
	send(3000)
	n := e.waitTotalsAddUp(c, reason)
	_, after := e.hostDropTotals(c)
	limit := hostlayer.LogBurst + int(time.Since(start).Seconds()*hostlayer.LogRate) + 2
	t.Logf("flood: %d dropped in all, %d of them logged one by one (at most %d)", n, after-before, limit)
	if after-before > limit || after-before == 0 {
		t.Errorf("a flood got %d packets logged one by one, want at most %d (and some)", after-before, limit)
	}

	// A new worker carries on: the same drops are not logged again.
	old := st.PID
	if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	e.waitState(c, "a new worker", servingOther(old))
	time.Sleep(2*droplog.DefaultInterval + 500*time.Millisecond)
	total, _ := e.hostDropTotals(c)
	if got := e.hostDropCounter(c, reason); total[reason] != got {
		t.Errorf("after the worker's restart the log says %d drops of %q, the counter %d", total[reason], reason, got)
	}
	send(1)
	e.waitTotalsAddUp(c, reason)
}

// TestGVisorHostDropsLogged: what the host-side layer drops of a runsc
// container's traffic is logged packet by packet (see
// checkHostDropLogging).
func TestGVisorHostDropsLogged(t *testing.T) {
	r := newRunscEnv(t)
	c := r.cniEnv.newContainer()
	r.mustAdd(c, r.conflist(map[string]any{"allowedHosts": []string{apiName}}))
	g := r.newContainer("gvd", withNetNS(c.ns.Path()), withoutHooks(), withNoCgroup())
	r.runDetached(g)
	dst := netip.AddrPortFrom(evilAddr4, testnet.PortUDPEcho).String()
	checkHostDropLogging(t, r.cniEnv, c, func(n int) {
		r.exec(g, "/probe", "udp", dst, "--send", "x", "--flood", fmt.Sprint(n-1), "--timeout", "500ms")
	})
}

// TestHostDropsLogged: the same for a workload on the host kernel's stack
// that flushed its own ruleset (it holds CAP_NET_ADMIN), and a packet it
// sends from an address not its own is logged with that address.
func TestHostDropsLogged(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(nil))
	if err := enforce.Remove(c.ns.Path()); err != nil {
		t.Fatal(err)
	}
	dst := netip.AddrPortFrom(evilAddr4, testnet.PortUDPEcho)
	send := func(n int, from netip.Addr) {
		err := c.ns.Do(func() error {
			var laddr *net.UDPAddr
			if from.IsValid() {
				laddr = &net.UDPAddr{IP: from.AsSlice()}
			}
			u, err := net.DialUDP("udp", laddr, net.UDPAddrFromAddrPort(dst))
			if err != nil {
				return err
			}
			defer u.Close()
			for range n {
				if _, err := u.Write([]byte("x")); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	checkHostDropLogging(t, e, c, func(n int) { send(n, netip.Addr{}) })

	// A spoofed source: the bridge table drops it, and its line names
	// the address it carried.
	spoofed := netip.MustParseAddr("10.99.0.77")
	if out, err := c.ns.Command(context.Background(), "ip", "addr", "add", spoofed.String()+"/32", "dev", "eth0").CombinedOutput(); err != nil {
		t.Fatalf("ip addr add: %v %s", err, out)
	}
	send(1, spoofed)
	d := e.waitDecision(c, hostDropLine("host-layer: ipv4 not from the sandbox's addresses", "udp", dst.String()))
	if !strings.HasPrefix(fmt.Sprint(d["client"]), spoofed.String()+":") {
		t.Errorf("spoofed packet's line %v: want client %s", d, spoofed)
	}
}
