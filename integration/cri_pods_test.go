package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
)

// The tests of doorman's Kubernetes pods through containerd's CRI plugin
// (issue 16): per-pod policy from the pod's annotations, the installer's
// defaults, excluded namespaces, pod DNS, cluster names and pods that
// doorman does not enforce. The node is cri_env_test.go's.

// TestCRIPodAnnotations: on a network whose policy allows apiName, a pod
// annotated to allow otherName only reaches otherName, by name over HTTPS
// and HTTP, and nothing else: not apiName (the network's), not evilName,
// no raw TCP, UDP or QUIC, counted at the fake internet's listeners; its
// decision lines name it <namespace>/<pod> with its uid. The CLI knows it
// by that id: ls shows it, show and allow take it, and the allow is in
// force at once. A pod annotated mode none reaches nothing, not even the
// network's apiName, and has no proxy. A pod whose annotations do not
// parse is refused: crictl runp fails with the annotation and the value,
// and doorman leaves nothing behind.
func TestCRIPodAnnotations(t *testing.T) {
	skipUnlessCRI(t)
	e := newCNIEnv(t)
	c := newCRIEnv(t, e)

	p := c.mustRunPod(criPodSpec{annotations: map[string]string{
		"doorman.io/mode": "allowlist", "doorman.io/allowed-hosts": otherName, "example.com/team": "ci",
	}})
	assertCRIEnforced(t, c, p)
	ctr := c.startProbe(p)
	probe := func(args ...string) sessionResult { t.Helper(); return c.probe(ctr, args...) }
	before := criCounters(e)
	otherBefore := otherCounts(e)

	for _, url := range []string{"https://" + otherName + "/pod", "http://" + otherName + "/pod"} {
		if r := probe("get", url, "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+otherName+" ") {
			t.Errorf("%s, which the pod's annotation allows: %v", url, r)
		}
	}
	// The network's apiName is not the pod's: no answer from the DNS
	// filter, a TLS alert and a 403 naming the pod at its address.
	if r := probe("get", "https://"+apiName+"/", "--ca", "/ca.pem"); !probeFailed(r, 1) || !strings.Contains(r.stderr, "lookup "+apiName) {
		t.Errorf("%s by name: want the lookup refused, got %v", apiName, r)
	}
	if r := probe("get", "https://"+apiName+"/", "--ca", "/ca.pem", "--resolve", apiName+":"+apiAddr4.String()); r.exit != 3 || !strings.Contains(r.stderr, "access denied") {
		t.Errorf("%s by address: want a TLS access_denied alert, got %v", apiName, r)
	}
	if r := probe("get", "http://"+apiName+"/", "--resolve", apiName+":"+apiAddr4.String()); r.exit != 0 ||
		!strings.HasPrefix(r.stdout, "status: 403\n") || !strings.Contains(r.stdout, p.sandboxID()) {
		t.Errorf("%s over HTTP: want a 403 naming the pod %s, got %v", apiName, p.sandboxID(), r)
	}
	if r := probe("get", "https://"+evilName+"/", "--ca", "/ca.pem", "--resolve", evilName+":"+evilAddr4.String()); r.exit != 3 {
		t.Errorf("%s: want a TLS alert, got %v", evilName, r)
	}
	// Raw TCP to the allowed host (no name: no rule), UDP and QUIC.
	for _, dst := range []netip.AddrPort{netip.AddrPortFrom(otherAddr, testnet.PortRecorder), netip.AddrPortFrom(evilAddr4, testnet.PortRecorder)} {
		if r := probe("tcp", dst.String(), "--send", "hello\r\n", "--timeout", "3s"); !probeFailed(r, 4, 5) {
			t.Errorf("raw TCP to %v: want no reply, got %v", dst, r)
		}
	}
	for _, dst := range []netip.AddrPort{
		netip.AddrPortFrom(otherAddr, testnet.PortUDPEcho), netip.AddrPortFrom(otherAddr, testnet.PortHTTPS), // QUIC
		netip.AddrPortFrom(evilAddr4, testnet.PortUDPEcho),
	} {
		if r := probe("udp", dst.String(), "--timeout", "2s"); !probeFailed(r, 1, 4, 5) {
			t.Errorf("UDP to %v: want no answer, got %v", dst, r)
		}
	}
	after, otherAfter := criCounters(e), otherCounts(e)
	if after.apiRequests != before.apiRequests || after.apiUDP != before.apiUDP || after.evil != before.evil {
		t.Errorf("%s or %s saw traffic from the pod: %+v before, %+v after", apiName, evilName, before, after)
	}
	if got := otherAfter.requests - otherBefore.requests; got != 2 {
		t.Errorf("%s served %d requests, want the 2 allowed ones", otherName, got)
	}
	if otherAfter.tcp != otherBefore.tcp || otherAfter.udp != otherBefore.udp {
		t.Errorf("%s's recorder or UDP ports saw the pod: %+v before, %+v after", otherName, otherBefore, otherAfter)
	}
	d := e.waitDecision(&container{key: p.key}, decided(otherName, "allow"))
	if d["sandbox"] != p.sandboxID() || d["pod_uid"] != p.uid {
		t.Errorf("decision line: sandbox %v pod_uid %v, want %s and %s", d["sandbox"], d["pod_uid"], p.sandboxID(), p.uid)
	}
	e.waitDecision(&container{key: p.key}, decided(apiName, "deny"))

	// The CLI, by the pod's id.
	if r := e.mustCLI("ls"); !slices.ContainsFunc(strings.Split(r.stdout, "\n"), func(l string) bool {
		return strings.HasPrefix(l, p.sandboxID()+" ") && strings.Contains(l, " "+p.name+" ") && strings.HasSuffix(strings.TrimSpace(l), " full")
	}) {
		t.Errorf("ls has no row for %s:\n%s", p.sandboxID(), r.stdout)
	}
	if r := e.mustCLI("show", p.sandboxID()); !strings.Contains(r.stdout, "sandbox      "+p.key) || !strings.Contains(r.stdout, "pod uid      "+p.uid) ||
		!strings.Contains(r.stdout, "policy       "+otherName) {
		t.Errorf("show %s:\n%s", p.sandboxID(), r.stdout)
	}
	e.mustCLI("allow", p.sandboxID(), evilName)
	if r := probe("get", "https://"+evilName+"/allowed", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+evilName+" ") {
		t.Errorf("%s after doorman allow %s: %v", evilName, p.sandboxID(), r)
	}

	// Mode none: nothing leaves, not even to the network's apiName.
	none := c.mustRunPod(criPodSpec{annotations: map[string]string{"doorman.io/mode": "none"}})
	s := e.state(&container{key: none.key})
	if s.Mode != "none" || s.PID != 0 || s.ID != none.sandboxID() || len(proxiesFor(none.sandboxID())) != 0 {
		t.Errorf("state of the mode none pod: mode %q proxy %d id %q; want none, no proxy, %s", s.Mode, s.PID, s.ID, none.sandboxID())
	}
	if ok, err := enforce.Present(c.netnsPath(none)); err != nil || !ok {
		t.Errorf("doorman's table in the mode none pod: %v, %v", ok, err)
	}
	noneCtr := c.startProbe(none)
	before = criCounters(e)
	for _, args := range [][]string{
		{"get", "https://" + apiName + "/", "--ca", "/ca.pem", "--timeout", "3s"},
		{"get", "https://" + apiName + "/", "--ca", "/ca.pem", "--resolve", apiName + ":" + apiAddr4.String(), "--timeout", "3s"},
		{"udp", netip.AddrPortFrom(apiAddr4, testnet.PortHTTPS).String(), "--timeout", "2s"},
		{"dns", e.net.DNS.String(), apiName, "--timeout", "2s"},
	} {
		if r := c.probe(noneCtr, args...); !probeFailed(r, 1, 4, 5) {
			t.Errorf("mode none: %v: want no answer, got %v", args, r)
		}
	}
	if after := criCounters(e); after != before {
		t.Errorf("the fake internet saw the mode none pod: %+v before, %+v after", before, after)
	}

	// Annotations that do not parse: the sandbox fails with the
	// annotation and the value, and nothing is left.
	for _, tc := range []struct{ annotation, value string }{
		{"doorman.io/mode", "permissive"},
		{"doorman.io/allowed-hosts", apiName + ",a*b.example.test"},
		{"doorman.io/allow-direct", "db.example.test"},
	} {
		states, _ := sandbox.List(e.stateDir)
		bad, r := c.runPod(criPodSpec{annotations: map[string]string{tc.annotation: tc.value}})
		if bad != nil {
			t.Errorf("%s=%s: the pod sandbox started", tc.annotation, tc.value)
			continue
		}
		value := tc.value
		if i := strings.LastIndexByte(value, ','); i >= 0 {
			value = value[i+1:]
		}
		if !strings.Contains(r.stderr, tc.annotation) || !strings.Contains(r.stderr, value) || !strings.Contains(r.stderr, "doorman: pod default/") {
			t.Errorf("%s=%s: crictl runp's error does not name the pod, the annotation and the value: %v", tc.annotation, tc.value, r)
		}
		if after, _ := sandbox.List(e.stateDir); len(after) != len(states) {
			t.Errorf("%s=%s: %d sandboxes recorded before, %d after the refused pod", tc.annotation, tc.value, len(states), len(after))
		}
	}
	if left := proxiesUnder(e.stateDir); !slices.Equal(left, []int{e.state(&container{key: p.key}).PID}) {
		t.Errorf("proxy processes of the test: %v, want the annotated pod's alone, none for mode none or the refused pods", left)
	}
}

// otherTraffic is what otherName's listeners counted.
type otherTraffic struct{ requests, tcp, udp int }

func otherCounts(e *cniEnv) otherTraffic {
	return otherTraffic{
		requests: e.other.RequestsFor(otherName),
		tcp:      e.other.Received(testnet.PortRecorder) + e.other.Connections(testnet.PortRecorder),
		udp:      e.other.UDPDatagrams(testnet.PortUDPEcho) + e.other.UDPDatagrams(testnet.PortHTTPS),
	}
}

// realInstaller is the criInstaller that runs the real installer on the
// conf dir, `doorman install-cni --once --cni-bin-dir ... --cni-conf-dir
// ... --config FILE`, as the DaemonSet runs it on a node, with config
// (its --config, plus the test's state and log directories).
func realInstaller(config map[string]any) criInstaller {
	return func(c *criEnv, confDir string) {
		tb := c.tb
		tb.Helper()
		cfg := map[string]any{"stateDir": c.e.stateDir, "logDir": c.e.logDir}
		for k, v := range config {
			cfg[k] = v
		}
		data, err := json.Marshal(cfg)
		if err != nil {
			tb.Fatal(err)
		}
		path := filepath.Join(c.dir, "install-cni-"+filepath.Base(confDir)+".json")
		writeFile(tb, path, data)
		r := runCommand(tb, doormanBin(), "install-cni", "--once", "--cni-bin-dir", c.cniBinDir, "--cni-conf-dir", confDir, "--config", path)
		if r.exit != 0 {
			tb.Fatalf("doorman install-cni: %v", r)
		}
	}
}

// TestCRIInstallerDefaults: a node whose doorman entry the real installer
// wrote with a --config allowing otherName. A pod without annotations
// gets that policy: it reaches otherName, not apiName. A pod in
// kube-system (excluded by default) passes through untouched: no proxy,
// no table, no host-side chain, it reaches evilName, which no policy
// allows; doorman records it as n/a (excluded namespace), ls shows it,
// the runtime's log has doorman's line, and its stopp and rmp leave
// nothing.
func TestCRIInstallerDefaults(t *testing.T) {
	skipUnlessCRI(t)
	e := newCNIEnv(t)
	c := newCRIEnv(t, e, withCRIInstaller(realInstaller(map[string]any{"mode": "allowlist", "allowedHosts": []string{otherName}})))
	data, err := os.ReadFile(firstCNIConfig(t, c.confDirs[criDefaultHandler]))
	if err != nil || strings.Count(string(data), `"doorman"`) != 1 {
		t.Fatalf("the installer's conflist (%v):\n%s", err, data)
	}

	p := c.mustRunPod(criPodSpec{})
	assertCRIEnforced(t, c, p)
	ctr := c.startProbe(p)
	before := criCounters(e)
	if r := c.probe(ctr, "get", "https://"+otherName+"/default", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+otherName+" ") {
		t.Errorf("%s, which the installer's --config allows: %v", otherName, r)
	}
	if r := c.probe(ctr, "get", "https://"+apiName+"/", "--ca", "/ca.pem", "--resolve", apiName+":"+apiAddr4.String()); r.exit != 3 {
		t.Errorf("%s, which it does not: want a TLS alert, got %v", apiName, r)
	}
	if after := criCounters(e); after.apiRequests != before.apiRequests {
		t.Errorf("%s served the pod", apiName)
	}

	// kube-system: untouched.
	sys := c.mustRunPod(criPodSpec{namespace: "kube-system", name: "coredns-" + c.suffix})
	s := e.state(&container{key: sys.key})
	if s.Unenforced != "excluded namespace" || s.Label != "n/a (excluded namespace)" || s.ID != sys.sandboxID() || s.PID != 0 {
		t.Errorf("record of the kube-system pod: %+v", s)
	}
	if pids := proxiesFor(sys.sandboxID()); len(pids) != 0 {
		t.Errorf("proxy processes for the kube-system pod: %v", pids)
	}
	if ok, err := enforce.Present(c.netnsPath(sys)); err != nil || ok {
		t.Errorf("doorman's table in the kube-system pod: %v, %v", ok, err)
	}
	if hostLayerHolds(t, e.net.HostPath(), sys.key) {
		t.Errorf("the host-side layer has a chain for the kube-system pod")
	}
	sysCtr := c.startProbe(sys)
	if r := c.probe(sysCtr, "get", "https://"+evilName+"/kube-system", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+evilName+" ") {
		t.Errorf("the kube-system pod to %s, which no policy allows: %v", evilName, r)
	}
	if !strings.Contains(c.containerdLog(), "doorman: pod "+sys.sandboxID()+" (sandbox "+sys.key+") is in excluded namespace kube-system: passed through, not enforced") {
		t.Errorf("containerd's log has no line from doorman about the kube-system pod:\n%s", c.containerdLogTail())
	}
	r := e.mustCLI("ls")
	if !slices.ContainsFunc(strings.Split(r.stdout, "\n"), func(l string) bool {
		return strings.Join(strings.Fields(l), " ") == sys.sandboxID()+" "+sys.name+" cni - - - n/a - 0 0 - n/a (excluded namespace)"
	}) {
		t.Errorf("ls has no row for the kube-system pod:\n%s", r.stdout)
	}
	if r := c.stopPod(sys); r.exit != 0 {
		t.Fatal(r)
	}
	if r := c.removePod(sys); r.exit != 0 {
		t.Fatal(r)
	}
	assertPodGone(t, e, sys)
}

// TestCRIClusterNames: the installer's --config names the cluster's
// service CIDR, 10.96.0.0/12; a service stands on 10.96.0.50 on the
// node's LAN (testnet's), and the cluster DNS (the fake internet's)
// answers api.default.svc.cluster.local with it. A pod allowed
// *.svc.cluster.local and rebind.example.test (which the same DNS points
// at the service's address) with the kubelet's search list and ndots:5
// reaches the service by its cluster name; rebind.example.test does not
// resolve, and by address gets a 403 whose log line says private
// upstream; db.default.svc.cluster.local, under the cluster domain but
// pointed at 10.0.0.5 outside the service CIDR, is refused too. The LAN's
// servers count the one request.
func TestCRIClusterNames(t *testing.T) {
	skipUnlessCRI(t)
	const (
		svcName    = "api.default.svc.cluster.local"
		dbName     = "db.default.svc.cluster.local"
		rebindName = "rebind.example.test"
	)
	e := newCNIEnv(t)
	svcAddr, lanAddr := netip.MustParseAddr("10.96.0.50"), netip.MustParseAddr("10.0.0.5")
	svc := e.net.AddLANHost("svc.lan.test", svcAddr)
	lan := e.net.AddLANHost("db.lan.test", lanAddr)
	e.net.AddRecord(svcName, svcAddr)
	e.net.AddRecord(rebindName, svcAddr)
	e.net.AddRecord(dbName, lanAddr)
	c := newCRIEnv(t, e, withCRIInstaller(realInstaller(map[string]any{"serviceCIDRs": []string{"10.96.0.0/12"}})))

	p := c.mustRunPod(criPodSpec{
		annotations: map[string]string{"doorman.io/allowed-hosts": "*.svc.cluster.local," + rebindName},
		dns: &criDNS{Servers: []string{e.net.DNS.String()}, Searches: []string{"default.svc.cluster.local", "svc.cluster.local", "cluster.local"},
			Options: []string{"ndots:5"}},
	})
	assertCRIEnforced(t, c, p)
	ctr := c.startProbe(p)
	if r := c.probe(ctr, "get", "http://"+svcName+"/svc"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\nsvc.lan.test ") {
		t.Errorf("%s, a cluster name in the service CIDR: %v", svcName, r)
	}
	if r := c.probe(ctr, "get", "http://"+rebindName+"/"); !probeFailed(r, 1) || !strings.Contains(r.stderr, "lookup "+rebindName) {
		t.Errorf("%s, outside the cluster domain, pointed at the service: want its lookup refused, got %v", rebindName, r)
	}
	for _, tc := range []struct {
		name string
		addr netip.Addr
	}{{rebindName, svcAddr}, {dbName, lanAddr}} {
		if r := c.probe(ctr, "get", "http://"+tc.name+"/", "--resolve", tc.name+":"+tc.addr.String()); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 403\n") {
			t.Errorf("%s at %s: want a 403, got %v", tc.name, tc.addr, r)
		}
		d := e.waitDecision(&container{key: p.key}, decided(tc.name, "deny"))
		if reason, _ := d["reason"].(string); !strings.HasPrefix(reason, "private upstream "+tc.addr.String()) {
			t.Errorf("%s: decision %v, want the reason private upstream %s", tc.name, d, tc.addr)
		}
	}
	if n := svc.RequestsFor(svcName); n != 1 {
		t.Errorf("the service served %d requests for %s, want 1", n, svcName)
	}
	if n := svc.RequestsFor(rebindName) + lan.Requests(); n != 0 {
		t.Errorf("the LAN served %d requests for names outside the service CIDR's scope", n)
	}
	e.waitDecision(&container{key: p.key}, decided(svcName, "allow"))
}

// TestCRIUnenforcedPods: a pod started while the node's conflist had no
// doorman entry is not enforced, and stays so after the installer chains
// doorman: `doorman ls --all` lists its network namespace as unenforced,
// with its pause process and the pod's uid (from its cgroup), while a pod
// started after the install is listed, enforced, as <namespace>/<pod>,
// and not among the unenforced.
func TestCRIUnenforcedPods(t *testing.T) {
	skipUnlessCRI(t)
	e := newCNIEnv(t)
	net := criDefaultNetwork
	net.doorman = false
	c := newCRIEnv(t, e, withCRINetworks(net))

	old := c.mustRunPod(criPodSpec{})
	if states, _ := sandbox.List(e.stateDir); len(states) != 0 {
		t.Fatalf("doorman recorded a pod before it was chained: %v", states)
	}
	realInstaller(nil)(c, c.confDirs[criDefaultHandler])
	c.waitCNIConfig("doorman")
	p := c.mustRunPod(criPodSpec{})
	assertCRIEnforced(t, c, p)

	oldPID, newPID := c.inspectPod(old).Info.PID, c.inspectPod(p).Info.PID
	r := e.mustCLI("ls", "--all", "-o", "json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &rows); err != nil {
		t.Fatalf("ls --all -o json: %v\n%s", err, r.stdout)
	}
	var sawOld, sawNew bool
	for _, row := range rows {
		switch {
		case row["id"] == p.sandboxID() && row["key"] == p.key:
			sawNew = true
		case row["label"] == "unenforced" && row["pid"] == float64(oldPID):
			sawOld = true
			if row["podUID"] != old.uid || row["netnsInode"] != float64(netnsInode(t, oldPID)) {
				t.Errorf("the old pod's row: %v, want its uid %s and netns inode %d", row, old.uid, netnsInode(t, oldPID))
			}
		case row["label"] == "unenforced" && row["netnsInode"] == float64(netnsInode(t, newPID)):
			t.Errorf("the enforced pod is listed as unenforced: %v", row)
		}
	}
	if !sawOld || !sawNew {
		t.Errorf("ls --all: the old pod (pid %d) listed unenforced %v, the new one %s enforced %v:\n%s", oldPID, sawOld, p.sandboxID(), sawNew, r.stdout)
	}
	r = e.mustCLI("ls", "--all")
	if !strings.Contains(r.stdout, "unenforced (pod "+old.uid+")") {
		t.Errorf("ls --all names no unenforced pod %s:\n%s", old.uid, r.stdout)
	}
}

// runCommand runs name with args in the test's namespaces (the root
// ones) and returns what it did.
func runCommand(tb testing.TB, name string, args ...string) sessionResult {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	r := sessionResult{tool: filepath.Base(name), args: args}
	err := cmd.Run()
	r.stdout, r.stderr = out.String(), errb.String()
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.exit = ee.ExitCode()
	default:
		tb.Fatalf("run %s: %v", name, err)
	}
	return r
}

// waitCNIConfig waits until the CRI plugin has loaded a CNI configuration
// with a plugin of type pluginType (it reloads its conf dir when a file
// there changes), as `crictl info` reports it.
func (c *criEnv) waitCNIConfig(pluginType string) {
	tb := c.tb
	tb.Helper()
	want := fmt.Sprintf(`"type":%q`, pluginType)
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := c.crictl("info")
		var info map[string]json.RawMessage
		if r.exit == 0 && json.Unmarshal([]byte(r.stdout), &info) == nil {
			var cni any
			if json.Unmarshal(info["cniconfig"], &cni) == nil {
				if data, _ := json.Marshal(cni); strings.Contains(string(data), want) {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the CRI plugin has not loaded a CNI configuration with %s after 30s: %v", want, r)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
