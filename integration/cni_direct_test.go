package integration

import (
	"net/netip"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
)

// TestCNIUpdateDirect: a running CNI sandbox's allowDirect and ICMP change
// live (sandbox.UpdateDirect, what the Kubernetes node agent calls). With
// allowDirect naming a host, a direct connection and an echo reach it;
// narrowed away, a new connection never reaches it (the proxy gets it and
// refuses it), no echo gets out, not even once the workload flushes its
// own ruleset (the host-side layer was narrowed too), while the proxy
// still serves the allowed name; widened back, direct connections and
// echoes get through again.
func TestCNIUpdateDirect(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	direct := otherAddr.String() + ":5432"
	e.mustAdd(c, e.conflist(map[string]any{"allowDirect": []string{direct}, "allowICMP": true}))
	wide := e.state(c).AllowDirect
	if len(wide) != 1 || wide[0].String() != direct {
		t.Fatalf("state allowDirect %v, want %s", wide, direct)
	}
	dst := netip.AddrPortFrom(otherAddr, testnet.PortPostgres)
	update := func(ds []conf.Direct, icmp bool) {
		t.Helper()
		var u *sandbox.Update
		err := e.net.InHost(func() error {
			var err error
			u, err = sandbox.UpdateDirect(e.stateDir, c.key, ds, icmp)
			return err
		})
		if err != nil {
			t.Fatalf("UpdateDirect(%v, %v): %v", ds, icmp, err)
		}
		if !u.Changed {
			t.Fatalf("UpdateDirect(%v, %v): not changed", ds, icmp)
		}
	}
	// reaches says whether a new direct connection's bytes reach the host.
	reaches := func() bool {
		t.Helper()
		before := e.other.Received(testnet.PortPostgres)
		tcpSendRecv(c.ns, dst, "direct") // recorders never answer; the bytes count
		deadline := time.Now().Add(2 * time.Second)
		for time.Now().Before(deadline) {
			if e.other.Received(testnet.PortPostgres) > before {
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		return false
	}

	if !reaches() {
		t.Fatal("allowDirect destination received nothing before the update")
	}
	if err := ping(c.ns, otherAddr); err != nil {
		t.Fatalf("echo to the allowDirect destination with allowICMP: %v", err)
	}

	// Narrowed: nothing direct any more.
	update(nil, false)
	if s := e.state(c); len(s.AllowDirect) != 0 || s.AllowICMP {
		t.Errorf("state after narrowing: allowDirect %v icmp %v", s.AllowDirect, s.AllowICMP)
	}
	if reaches() {
		t.Error("a new direct connection reached the destination after allowDirect was narrowed away")
	}
	if err := ping(c.ns, otherAddr); err == nil {
		t.Error("an echo got through after allowICMP was turned off and allowDirect narrowed away")
	}
	if r := curl(t, c.ns, e.caFile, "https://"+apiName+"/"); r.exit != 0 {
		t.Errorf("the proxy path after narrowing: allowed HTTPS failed: %v", r)
	}
	if err := e.check(c); err != nil {
		t.Errorf("CHECK after narrowing: %v", err)
	}
	// The host-side layer was narrowed too: a workload that flushes its
	// own ruleset still gets nothing direct out.
	if err := enforce.Remove(c.ns.Path()); err != nil {
		t.Fatal(err)
	}
	if reaches() {
		t.Error("with its own ruleset flushed, a direct connection passed the host-side layer after narrowing")
	}

	// Widened back (which applies the ruleset again, flushed or not).
	update(wide, true)
	if !tablePresent(t, c) {
		t.Fatal("no ruleset after widening")
	}
	if !reaches() {
		t.Error("allowDirect destination received nothing after widening back")
	}
	if err := ping(c.ns, otherAddr); err != nil {
		t.Errorf("echo after widening back: %v", err)
	}
	if err := e.check(c); err != nil {
		t.Errorf("CHECK after widening back: %v", err)
	}
	if err := e.del(c); err != nil {
		t.Fatalf("DEL: %v", err)
	}
}
