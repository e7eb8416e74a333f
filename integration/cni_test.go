package integration

import (
	"context"
	"crypto/tls"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/google/nftables"
	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/integration/testnet"
)

func TestCNIAllowedAndDenied(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(nil))

	// HTTPS: real curl, allowed and denied.
	if r := curl(t, c.ns, e.caFile, "https://"+apiName+"/"); r.exit != 0 || !strings.HasPrefix(r.stdout, apiName+" ") {
		t.Fatalf("allowed HTTPS: %v", r)
	}
	// A denied name does not even resolve: the DNS filter (on by
	// default) refuses it.
	r := curl(t, c.ns, e.caFile, "https://"+evilName+"/")
	if r.exit != 6 {
		t.Fatalf("denied name: want curl to fail resolving it (exit 6), got %v", r)
	}
	e.waitDNSDecision(c, evilName, "deny")
	// Reached by address, it gets the TLS alert.
	r = curl(t, c.ns, e.caFile, "--resolve", evilName+":443:"+evilAddr4.String(), "https://"+evilName+"/")
	if r.exit == 0 || !strings.Contains(strings.ToLower(r.stderr), "access denied") {
		t.Fatalf("denied HTTPS: want a TLS access_denied alert, got %v", r)
	}
	e.waitDecision(c, decided(evilName, "deny"))
	if n := e.evil.Requests(); n != 0 {
		t.Fatalf("evil host served %d requests", n)
	}

	// HTTP: allowed, and a 403 naming host and sandbox.
	if r := curl(t, c.ns, e.caFile, "http://"+apiName+"/plain"); r.exit != 0 || !strings.Contains(r.stdout, "GET /plain") {
		t.Fatalf("allowed HTTP: %v", r)
	}
	r = curl(t, c.ns, e.caFile, "-w", "%{http_code}", "--resolve", evilName+":80:"+evilAddr4.String(), "http://"+evilName+"/")
	if !strings.HasSuffix(r.stdout, "403") || !strings.Contains(r.stdout, evilName) || !strings.Contains(r.stdout, c.rt.ContainerID) {
		t.Fatalf("denied HTTP: want 403 naming %s and %s, got %v", evilName, c.rt.ContainerID, r)
	}

	// A Go client: its default ClientHello carries a post-quantum key share.
	client := c.ns.HTTPClient()
	resp, err := client.Get("https://" + apiName + "/go")
	if err != nil {
		t.Fatalf("Go client, allowed: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.TLS == nil || resp.TLS.CurveID != tls.X25519MLKEM768 {
		t.Fatalf("Go client: key exchange %v, want X25519MLKEM768", resp.TLS)
	}
	raw, err := c.ns.DialTCP(netip.AddrPortFrom(evilAddr4, 443).String())
	if err != nil {
		t.Fatalf("Go client, denied: dial: %v", err)
	}
	tc := tls.Client(raw, &tls.Config{ServerName: evilName, RootCAs: e.net.CertPool()})
	tc.SetDeadline(time.Now().Add(5 * time.Second))
	if err := tc.Handshake(); err == nil || !strings.Contains(err.Error(), "access denied") {
		t.Fatalf("Go client, denied: err = %v, want access denied", err)
	}
	tc.Close()

	// IPv6 behaves like IPv4.
	if r := curl(t, c.ns, e.caFile, "-6", "https://"+apiName+"/"); r.exit != 0 || !strings.Contains(r.stdout, "["+apiAddr6.String()+"]:443") {
		t.Fatalf("allowed HTTPS over IPv6: %v", r)
	}
	if r := curl(t, c.ns, e.caFile, "-6", "--resolve", evilName+":443:["+evilAddr6.String()+"]", "https://"+evilName+"/"); r.exit == 0 || !strings.Contains(strings.ToLower(r.stderr), "access denied") {
		t.Fatalf("denied HTTPS over IPv6: %v", r)
	}
}

func TestCNISNISpoofingReachesNamedHost(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(nil))
	r := curl(t, c.ns, e.caFile, "--resolve", apiName+":443:"+evilAddr4.String(), "https://"+apiName+"/spoof")
	real := []string{apiAddr4.String() + ":443", "[" + apiAddr6.String() + "]:443"}
	if r.exit != 0 || !(strings.HasPrefix(r.stdout, apiName+" "+real[0]) || strings.HasPrefix(r.stdout, apiName+" "+real[1])) {
		t.Fatalf("spoofed SNI: want the real %s (%v) to answer, got %v", apiName, real, r)
	}
	if n := e.evil.Requests(); n != 0 {
		t.Fatalf("the spoofed IP's server saw %d requests", n)
	}
	d := e.waitDecision(c, decided(apiName, "allow"))
	if d["dst"] != evilAddr4.String()+":443" || (d["upstream"] != real[0] && d["upstream"] != real[1]) {
		t.Fatalf("decision %v", d)
	}
}

func TestCNINoNameNeedsAddressRule(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(map[string]any{"allowedHosts": []string{apiName, otherAddr.String()}}))
	// A bare IP: no SNI, so only address rules can admit it.
	if r := curl(t, c.ns, e.caFile, "-k", "https://"+apiAddr4.String()+"/"); r.exit == 0 {
		t.Fatalf("bare IP of an allowed name without SNI got through: %v", r)
	}
	if r := curl(t, c.ns, e.caFile, "-k", "https://"+otherAddr.String()+"/"); r.exit != 0 || !strings.HasPrefix(r.stdout, otherName+" "+otherAddr.String()) {
		t.Fatalf("address rule: %v", r)
	}
	// Any TCP port of a host that is not allowed: refused, nothing arrives.
	for _, port := range []uint16{testnet.PortRecorder, testnet.PortSSH, testnet.PortPostgres} {
		if err := tcpSendRecv(c.ns, netip.AddrPortFrom(evilAddr4, port), "hello\r\n"); err == nil {
			t.Errorf("TCP to %v:%d got a reply", evilAddr4, port)
		}
		if n := e.evil.Received(int(port)); n != 0 {
			t.Errorf("evil received %d bytes on port %d", n, port)
		}
	}
}

func TestCNIUDPDNSAndICMP(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(nil))
	ctx := context.Background()

	if err := udpEcho(c.ns, netip.AddrPortFrom(evilAddr4, testnet.PortUDPEcho)); err == nil {
		t.Error("UDP to a non-resolver was echoed")
	}
	if err := udpEcho(c.ns, netip.AddrPortFrom(apiAddr4, testnet.PortHTTPS)); err == nil {
		t.Error("UDP (QUIC port) to an allowed host was echoed")
	}
	if n := e.evil.UDPDatagrams(testnet.PortUDPEcho) + e.api.UDPDatagrams(testnet.PortHTTPS); n != 0 {
		t.Errorf("%d UDP datagrams arrived", n)
	}

	for _, srv := range []netip.Addr{e.net.DNS, e.net.DNS6} {
		m, err := c.ns.QueryDNS(ctx, srv, apiName, dns.TypeA)
		if err != nil || len(m.Answer) == 0 {
			t.Errorf("DNS to the resolver %v: %v %v", srv, m, err)
		}
	}
	before := e.net.QueriesSeen(e.net.RogueDNS) + e.net.QueriesSeen(e.net.RogueDNS6)
	for _, srv := range []netip.Addr{e.net.RogueDNS, e.net.RogueDNS6} {
		if _, err := c.ns.QueryDNS(ctx, srv, apiName, dns.TypeA); err == nil {
			t.Errorf("DNS to a server that is not the resolver (%v) answered", srv)
		}
	}
	if n := e.net.QueriesSeen(e.net.RogueDNS) + e.net.QueriesSeen(e.net.RogueDNS6) - before; n != 0 {
		t.Errorf("rogue DNS saw %d queries", n)
	}

	// allowICMP is off by default; on, it admits small echo requests to
	// allowDirect destinations, and to nothing else.
	for _, dst := range []netip.Addr{evilAddr4, evilAddr6} {
		if err := ping(c.ns, dst); err == nil {
			t.Errorf("echo to %v got through with allowICMP default (false)", dst)
		}
	}
	pinger := e.newContainer()
	e.mustAdd(pinger, e.conflist(map[string]any{"allowICMP": true,
		"allowDirect": []string{evilAddr4.String() + ":5432", netip.PrefixFrom(evilAddr6, 128).String()}}))
	for _, dst := range []netip.Addr{evilAddr4, evilAddr6} {
		if err := ping(pinger.ns, dst); err != nil {
			t.Errorf("echo to allowDirect %v with allowICMP true: %v", dst, err)
		}
	}
	for _, dst := range []netip.Addr{apiAddr4, e.net.DNS} {
		if err := ping(pinger.ns, dst); err == nil {
			t.Errorf("echo to %v, not allowDirect, got through with allowICMP true", dst)
		}
	}
}

func TestCNILifecycle(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	list := e.conflist(nil)
	e.mustAdd(c, list)
	first := e.state(c)
	prev := e.bridgeResult(c)
	if _, err := e.doormanVerb(c, list, "ADD", prev); err != nil {
		t.Fatalf("second ADD: %v", err)
	}
	if again := e.state(c); again.PID != first.PID {
		t.Errorf("second ADD replaced the proxy (pid %d → %d)", first.PID, again.PID)
	}
	if err := e.check(c); err != nil {
		t.Fatalf("CHECK on a healthy sandbox: %v", err)
	}

	// CHECK notices a missing table...
	if err := enforce.Remove(c.ns.Path()); err != nil {
		t.Fatal(err)
	}
	if err := e.check(c); err == nil {
		t.Fatal("CHECK passed without the table")
	}
	if _, err := e.doormanVerb(c, list, "ADD", prev); err != nil { // ADD repairs
		t.Fatalf("ADD after the table was removed: %v", err)
	}
	if err := e.check(c); err != nil {
		t.Fatalf("CHECK after repair: %v", err)
	}

	// ...and a dead proxy (its supervisor killed first, else it would
	// start another; see TestSupervise*); with the proxy dead, no TCP
	// gets out.
	s := e.state(c)
	for _, pid := range []int{s.Supervisor.PID, s.PID} {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		waitGone(t, pid)
	}
	if err := e.check(c); err == nil {
		t.Fatal("CHECK passed with the proxy killed")
	}
	// (At the address: with the proxy, the DNS filter is gone too, and a
	// failed lookup would prove nothing about TCP.)
	if r := curl(t, c.ns, e.caFile, "--resolve", apiName+":443:"+apiAddr4.String(), "https://"+apiName+"/"); r.exit == 0 || r.exit == 6 {
		t.Fatalf("with the proxy dead, an allowed connection still got out (or was never tried): %v", r)
	}

	// DEL leaves nothing; DEL again is fine.
	if _, err := e.doormanVerb(c, list, "ADD", prev); err != nil {
		t.Fatalf("ADD with a dead proxy: %v", err)
	}
	s = e.state(c)
	if err := e.del(c); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	waitGone(t, s.PID)
	if tablePresent(t, c) {
		t.Error("table left after DEL")
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, c.key)); !os.IsNotExist(err) {
		t.Errorf("state dir left after DEL: %v", err)
	}
	if err := e.del(c); err != nil {
		t.Fatalf("second DEL: %v", err)
	}
}

// TestCNISecondAttachment: a container attached a second time (another
// interface, as a second network whose chain has doorman gives it) is
// refused by doorman, naming the sandbox that holds the namespace, and the
// first attachment's enforcement is left whole: its ruleset, proxy and
// host-side layer, and what its container can reach. (Replacing the
// ruleset, or removing it when the second ADD failed or at its DEL, would
// leave a running container unenforced.)
func TestCNISecondAttachment(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	list := e.conflist(nil)
	e.mustAdd(c, list)
	first := e.state(c)

	second := &container{
		ns:  c.ns,
		rt:  &libcni.RuntimeConf{ContainerID: c.rt.ContainerID, NetNS: c.ns.Path(), IfName: "eth1"},
		key: c.rt.ContainerID + "-eth1",
	}
	_, err := e.add(second, list)
	if err == nil || !strings.Contains(err.Error(), "already enforced by doorman sandbox "+c.key) {
		t.Errorf("ADD of a second attachment: %v, want doorman's refusal naming %s", err, c.key)
	}
	if err := e.del(second); err != nil { // as a runtime does after a failed ADD
		t.Errorf("DEL of the refused attachment: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, second.key)); !os.IsNotExist(err) {
		t.Errorf("state of the refused attachment: %v", err)
	}

	if s := e.state(c); s.PID != first.PID || !s.ProxyAlive() {
		t.Errorf("the first attachment's proxy: pid %d (alive %v), want %d", s.PID, s.ProxyAlive(), first.PID)
	}
	if err := e.check(c); err != nil {
		t.Errorf("CHECK of the first attachment: %v", err)
	}
	if err := e.checkInHost(c.key); err != nil {
		t.Errorf("the first attachment after the refused one: %v", err)
	}
	if r := curl(t, c.ns, e.caFile, "https://"+apiName+"/"); r.exit != 0 || !strings.HasPrefix(r.stdout, apiName+" ") {
		t.Errorf("allowed: %+v", r)
	}
	if r := curl(t, c.ns, e.caFile, "--resolve", evilName+":443:"+evilAddr4.String(), "https://"+evilName+"/"); r.exit == 0 {
		t.Errorf("denied host reached after the refused attachment: %+v", r)
	}
	if n := e.evil.Requests(); n != 0 {
		t.Errorf("evil served %d requests", n)
	}
}

func TestCNIGC(t *testing.T) {
	e := newCNIEnv(t)
	list := e.conflist(nil)
	keep, drop := e.newContainer(), e.newContainer()
	e.mustAdd(keep, list)
	e.mustAdd(drop, list)
	dropState := e.state(drop)
	if err := e.gc(list, []types.GCAttachment{{ContainerID: keep.rt.ContainerID, IfName: "eth0"}}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	waitGone(t, dropState.PID)
	if tablePresent(t, drop) {
		t.Error("GC left the table of a stale attachment")
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, drop.key)); !os.IsNotExist(err) {
		t.Error("GC left the state of a stale attachment")
	}
	if err := e.check(keep); err != nil {
		t.Errorf("GC harmed a valid attachment: %v", err)
	}
}

func TestCNIBadInput(t *testing.T) {
	e := newCNIEnv(t)
	cases := []struct {
		name   string
		extra  map[string]any
		policy string // per-container policy file content, if any
		want   string
	}{
		{name: "bad entry", extra: map[string]any{"allowedHosts": []string{apiName, "a*b.example.test"}}, want: `"a*b.example.test"`},
		{name: "unknown mode", extra: map[string]any{"mode": "permissive"}, want: "permissive"},
		{name: "bare star", extra: map[string]any{"allowedHosts": []string{"*"}}, want: "mode"},
		{name: "bad resolver", extra: map[string]any{"resolvers": []string{"dns.example"}}, want: "dns.example"},
		{name: "bad policy file", policy: "api.example.test\nnot a host!\n", want: "not a host!"},
		{name: "unreadable policy file", policy: "<dir>", want: "policy"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := e.newContainer()
			if tc.policy == "<dir>" {
				os.Mkdir(filepath.Join(e.policyDir, c.rt.ContainerID), 0o755)
			} else if tc.policy != "" {
				os.WriteFile(filepath.Join(e.policyDir, c.rt.ContainerID), []byte(tc.policy), 0o644)
			}
			_, err := e.add(c, e.conflist(tc.extra))
			defer e.del(c) // the runtime's cleanup of the bridge's part
			if err == nil {
				t.Fatal("ADD succeeded")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ADD error %q does not mention %q", err, tc.want)
			}
			assertNoTrace(t, e, c)
		})
	}
	t.Run("missing prevResult", func(t *testing.T) {
		c := e.newContainer()
		full := e.conflist(nil)
		alone := *full
		alone.Plugins = full.Plugins[1:]
		_, err := e.add(c, &alone)
		if err == nil || !strings.Contains(err.Error(), "prevResult missing") {
			t.Fatalf("ADD without an interface plugin: %v", err)
		}
		assertNoTrace(t, e, c)
	})
}

// assertNoTrace checks that a failed ADD left no state, table or proxy.
func assertNoTrace(t *testing.T, e *cniEnv, c *container) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(e.stateDir, c.key)); !os.IsNotExist(err) {
		t.Errorf("state left after a failed ADD: %v", err)
	}
	if tablePresent(t, c) {
		t.Error("table left after a failed ADD")
	}
	if pids := append(proxiesFor(c.rt.ContainerID), supervisorsFor(c.rt.ContainerID)...); len(pids) > 0 {
		t.Errorf("proxy processes left after a failed ADD: %v", pids)
	}
}

// proxiesFor lists doorman proxy processes serving sandbox id.
func proxiesFor(id string) []int { return doormanProcsFor("proxy", id) }

// supervisorsFor lists the supervisors of sandbox id's proxies.
func supervisorsFor(id string) []int { return doormanProcsFor("supervise", id) }

// doormanProcsFor lists the `doorman VERB` processes of sandbox id.
func doormanProcsFor(verb, id string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, d := range ents {
		var pid int
		if _, err := fmtSscan(d.Name(), &pid); err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 1 && args[1] == verb && strings.Contains(string(cmdline), "\x00"+id+"\x00") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// waitGone waits until pid has exited (or is a zombie).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		data, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat"))
		if err != nil {
			return
		}
		if i := strings.LastIndexByte(string(data), ')'); i > 0 && i+2 < len(data) && data[i+2] == 'Z' {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("process %d still running", pid)
}

func TestCNIVersionsAndStatus(t *testing.T) {
	e := newCNIEnv(t)
	// 0.3.1 is what the conflists of kindnet, flannel, Calico and Cilium
	// say: ADD and DEL, no CHECK (libcni does not send it below 0.4.0).
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			list := e.conflist(nil)
			list.CNIVersion = v
			list = e.reparse(list)
			if v == "1.0.0" || v == "1.1.0" { // STATUS exists from 1.1.0; libcni skips older
				if err := e.net.InHost(func() error { return e.cni.GetStatusNetworkList(context.Background(), list) }); err != nil {
					t.Fatalf("STATUS: %v", err)
				}
			}
			c := e.newContainer()
			res := e.mustAdd(c, list)
			if res.Version() != v {
				t.Errorf("result version %s, want %s", res.Version(), v)
			}
			if r := curl(t, c.ns, e.caFile, "https://"+apiName+"/"); r.exit != 0 {
				t.Fatalf("allowed HTTPS with cniVersion %s: %v", v, r)
			}
			if strings.HasPrefix(v, "0.3.") {
				if s := e.state(c); s.PID == 0 || !tablePresent(t, c) {
					t.Fatalf("cniVersion %s: state %+v, table present %v", v, s, tablePresent(t, c))
				}
			} else if err := e.check(c); err != nil {
				t.Fatalf("CHECK with cniVersion %s: %v", v, err)
			}
			if err := e.del(c); err != nil {
				t.Fatalf("DEL with cniVersion %s: %v", v, err)
			}
			assertNoTrace(t, e, c)
		})
	}
	// STATUS fails when the state directory cannot be written.
	bad := e.conflist(map[string]any{"stateDir": "/proc/doorman-cannot-exist"})
	if err := e.net.InHost(func() error { return e.cni.GetStatusNetworkList(context.Background(), bad) }); err == nil {
		t.Fatal("STATUS passed with an unusable state directory")
	}
}

// TestCNIHostLayer: with the host-side layer and the DNS filter (both on
// by default), a workload that flushes its own namespace's rules still gets
// nothing out but ICMP (DNS went through the filter, which the flush
// removed too); allowDirect reaches its destination on both layers. A
// conflist that opts out of both gets neither, and a label that says so.
func TestCNIHostLayer(t *testing.T) {
	e := newCNIEnv(t)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(map[string]any{
		"allowDirect": []string{otherAddr.String() + ":5432"},
	}))
	s := e.state(c)
	if !s.HostLayer || !s.DNSFilter || s.Label != "full" {
		t.Fatalf("state: hostLayer %v dnsFilter %v label %q, want both layers and label full", s.HostLayer, s.DNSFilter, s.Label)
	}

	// Opted out: the in-namespace rules alone, and DNS unfiltered (the
	// denied name resolves; the proxy still refuses it).
	bare := e.newContainer()
	e.mustAdd(bare, e.conflist(map[string]any{"hostLayer": false, "dnsFilter": false}))
	bs := e.state(bare)
	if bs.HostLayer || bs.DNSFilter || !strings.HasPrefix(bs.BaseLabel, "partial (") || bs.Label != withDNSGap(bs.BaseLabel) {
		t.Errorf("opted out: hostLayer %v dnsFilter %v label %q (in-namespace %q), want neither layer and %q",
			bs.HostLayer, bs.DNSFilter, bs.Label, bs.BaseLabel, withDNSGap(bs.BaseLabel))
	}
	if m, err := bare.ns.QueryDNS(context.Background(), e.net.DNS, evilName, dns.TypeA); err != nil || m.Rcode != dns.RcodeSuccess || len(m.Answer) == 0 {
		t.Errorf("opted out: DNS for %s: want its address, got %v (%v)", evilName, m, err)
	}
	if r := curl(t, bare.ns, e.caFile, "https://"+evilName+"/"); r.exit != 35 || !strings.Contains(strings.ToLower(r.stderr), "access denied") {
		t.Errorf("opted out: HTTPS to %s by name: want the TLS access_denied alert, got %v", evilName, r)
	}
	if err := e.check(bare); err != nil {
		t.Errorf("opted out: CHECK: %v", err)
	}
	if err := e.check(c); err != nil {
		t.Fatalf("CHECK: %v", err)
	}
	if r := curl(t, c.ns, e.caFile, "https://"+apiName+"/"); r.exit != 0 {
		t.Fatalf("allowed HTTPS with the host layer: %v", r)
	}
	// allowDirect: straight to the recorder, not through the proxy.
	if err := tcpSendRecv(c.ns, netip.AddrPortFrom(otherAddr, testnet.PortPostgres), "direct"); err == nil {
		t.Log("recorder answered") // recorders never answer; the bytes count
	}
	if n := e.other.Received(testnet.PortPostgres); n == 0 {
		t.Fatal("allowDirect destination received nothing")
	}
	// It bypassed the proxy, and still has its decision line.
	direct := netip.AddrPortFrom(otherAddr, testnet.PortPostgres).String()
	e.waitDecision(c, func(d map[string]any) bool {
		return d["reason"] == "allowDirect" && d["verdict"] == "allow" && d["dst"] == direct &&
			d["proto"] == "tcp" && d["rule"] == otherAddr.String()+":5432"
	})

	// The workload flushes its own ruleset (it holds CAP_NET_ADMIN).
	if err := enforce.Remove(c.ns.Path()); err != nil {
		t.Fatal(err)
	}
	for _, port := range []uint16{testnet.PortRecorder, testnet.PortSSH} {
		tcpSendRecv(c.ns, netip.AddrPortFrom(evilAddr4, port), "escape")
		if n := e.evil.Received(int(port)); n != 0 {
			t.Errorf("after flushing its own rules, %d bytes reached evil:%d", n, port)
		}
	}
	udpEcho(c.ns, netip.AddrPortFrom(evilAddr4, testnet.PortUDPEcho))
	if n := e.evil.UDPDatagrams(testnet.PortUDPEcho); n != 0 {
		t.Errorf("after flushing its own rules, %d UDP datagrams reached evil", n)
	}
	// DNS to the resolver never leaves unfiltered: with the DNS filter
	// on, the host-side layer redirects it to the filter's host-side
	// sockets, as the flushed ruleset did inside: an allowed name is
	// answered (from the resolver's address), a denied one refused.
	if m, err := c.ns.QueryDNS(context.Background(), e.net.DNS, apiName, dns.TypeA); err != nil || m.Rcode != dns.RcodeSuccess {
		t.Errorf("DNS for an allowed name after the flush: %v %v, want an answer through the filter", m, err)
	}
	if m, err := c.ns.QueryDNS(context.Background(), e.net.DNS, evilName, dns.TypeA); err != nil || m.Rcode != dns.RcodeRefused {
		t.Errorf("DNS for a denied name after the flush: %v %v, want REFUSED by the filter", m, err)
	}
	e.waitDNSDecision(c, evilName, "deny")
	if err := e.check(c); err == nil {
		t.Error("CHECK passed with the sandbox's own table gone")
	}
	if err := e.del(c); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	// The opted-out sandbox, still there, never had any.
	if tables := hostTables(t, e); len(tables) != 0 {
		t.Errorf("host-side tables left after DEL: %v", tables)
	}
}

// hostTables lists doorman's host-side tables in the test's host namespace.
func hostTables(t *testing.T, e *cniEnv) []string {
	t.Helper()
	var out []string
	err := e.net.InHost(func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		tables, err := c.ListTables()
		if err != nil {
			return err
		}
		for _, tb := range tables {
			if strings.HasPrefix(tb.Name, "doorman") {
				out = append(out, tb.Name)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
