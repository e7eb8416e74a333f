package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/integration/testnet"
)

// TestCRIPolicy runs a pod through containerd's CRI plugin, as the kubelet
// does, on a node whose conflist chains doorman after the primary network
// (bridge, host-local, portmap) with a network-wide policy allowing
// apiName. doorman records the pod sandbox (under the key of
// CNI_CONTAINERID, the pod sandbox's id; named <namespace>/<pod name>
// from CNI_ARGS) with its resolvers from the pod's dns_config, one proxy,
// its ruleset in the pod's namespace and the host-side layer. From a
// container of the pod, the probe reaches apiName over HTTPS and HTTP, by
// name through the pod's resolvers (the DNS filter); evilName does not
// resolve, gets a TLS alert and a 403 naming the pod at its addresses; raw
// TCP, UDP and QUIC (UDP 443) reach nothing, and the fake internet's
// listeners count nothing from the pod. The decision lines name the pod
// and carry its uid.
func TestCRIPolicy(t *testing.T) {
	skipUnlessCRI(t)
	begin := time.Now()
	e := newCNIEnv(t)
	c := newCRIEnv(t, e)
	t.Logf("setup (fake internet, containerd, pause and probe images): %v", time.Since(begin).Round(time.Millisecond))

	step := time.Now()
	// An annotation of no meaning to doorman: the network's policy
	// applies.
	p := c.mustRunPod(criPodSpec{annotations: map[string]string{"example.com/team": "ci"}})
	t.Logf("crictl runp: %v", time.Since(step).Round(time.Millisecond))
	assertCRIEnforced(t, c, p)
	s := e.state(&container{key: p.key})
	if want := []netip.Addr{e.net.DNS, e.net.DNS6}; !slices.Equal(s.Resolvers, want) {
		t.Errorf("resolvers %v, want %v: the pod's dns_config servers, from the dns capability", s.Resolvers, want)
	}
	if s.Name != p.name || s.Network != criDefaultNetwork.name || s.IfName != "eth0" {
		t.Errorf("state: name %q network %q ifname %q; want the pod's name %q, network %q, eth0", s.Name, s.Network, s.IfName, p.name, criDefaultNetwork.name)
	}
	t.Logf("the proxy's cgroups (the pod's parent is %s): %v", p.cgroupParent, processCgroups(t, s.PID))

	step = time.Now()
	ctr := c.startProbe(p)
	t.Logf("crictl create and start: %v", time.Since(step).Round(time.Millisecond))

	step = time.Now()
	probe := func(args ...string) sessionResult { t.Helper(); return c.probe(ctr, args...) }
	before := criCounters(e)

	// HTTPS and HTTP to the allowed name, resolved through the pod's
	// resolvers, and at each family's literal address.
	for _, via := range []netip.Addr{{}, apiAddr4, apiAddr6} {
		args := []string{"get", "https://" + apiName + "/cri", "--ca", "/ca.pem"}
		if via.IsValid() {
			args = append(args, "--resolve", apiName+":"+via.String())
		}
		if r := probe(args...); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("allowed HTTPS (address %v): %v", via, r)
		}
	}
	if r := probe("get", "http://"+apiName+"/cri"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
		t.Errorf("allowed HTTP: %v", r)
	}
	if n := e.api.RequestsFor(apiName) - before.apiRequests; n != 4 {
		t.Errorf("%s served %d requests from the pod, want 4", apiName, n)
	}

	// The denied name: no answer from the DNS filter, a TLS alert and a
	// 403 naming the pod sandbox at its addresses.
	if r := probe("get", "https://"+evilName+"/", "--ca", "/ca.pem"); !probeFailed(r, 1) || !strings.Contains(r.stderr, "lookup "+evilName) {
		t.Errorf("denied name: want the probe to fail resolving it, got %v", r)
	}
	for _, via := range []netip.Addr{evilAddr4, evilAddr6} {
		if r := probe("get", "https://"+evilName+"/", "--ca", "/ca.pem", "--resolve", evilName+":"+via.String()); r.exit != 3 || !strings.Contains(r.stderr, "access denied") {
			t.Errorf("denied HTTPS (address %v): want the probe's exit 3 with a TLS access_denied alert, got %v", via, r)
		}
	}
	if r := probe("get", "http://"+evilName+"/", "--resolve", evilName+":"+evilAddr4.String()); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 403\n") ||
		!strings.Contains(r.stdout, evilName) || !strings.Contains(r.stdout, p.sandboxID()) {
		t.Errorf("denied HTTP: want a 403 naming %s and the pod %s, got %v", evilName, p.sandboxID(), r)
	}

	// Raw TCP to the denied host, UDP to it and QUIC to the allowed one.
	if r := probe("tcp", netip.AddrPortFrom(evilAddr4, testnet.PortRecorder).String(), "--send", "hello\r\n", "--timeout", "3s"); !probeFailed(r, 4, 5) {
		t.Errorf("TCP to a recorder port of %s: want no reply, got %v", evilName, r)
	}
	for _, dst := range []netip.AddrPort{
		netip.AddrPortFrom(evilAddr4, testnet.PortUDPEcho),
		netip.AddrPortFrom(apiAddr4, testnet.PortHTTPS), // QUIC's port of the allowed host
		netip.AddrPortFrom(apiAddr6, testnet.PortHTTPS),
	} {
		if r := probe("udp", dst.String(), "--timeout", "2s"); !probeFailed(r, 1, 4, 5) {
			t.Errorf("UDP to %v: want no answer, got %v", dst, r)
		}
	}
	after := criCounters(e)
	if after.evil != before.evil {
		t.Errorf("%s saw requests, bytes or datagrams from the pod: %+v before, %+v after", evilName, before.evil, after.evil)
	}
	if after.apiUDP != before.apiUDP {
		t.Errorf("%s's UDP 443 got %d datagrams from the pod (QUIC)", apiName, after.apiUDP-before.apiUDP)
	}

	// The decision log, under the pod sandbox's key: the lines name the
	// pod and carry its uid.
	d := e.waitDecision(&container{key: p.key}, decided(apiName, "allow"))
	if d["sandbox"] != p.sandboxID() || d["pod_uid"] != p.uid {
		t.Errorf("decision line: sandbox %v pod_uid %v, want %s and %s", d["sandbox"], d["pod_uid"], p.sandboxID(), p.uid)
	}
	e.waitDecision(&container{key: p.key}, decided(evilName, "deny"))
	e.waitDNSDecision(&container{key: p.key}, evilName, "deny")
	t.Logf("checks by crictl exec: %v", time.Since(step).Round(time.Millisecond))
}

// TestCRIPodDNS gives a pod a dns_config naming a resolver the node's
// resolv.conf does not (the fake internet's second server, playing the
// cluster DNS) and a name only that resolver knows (the node's resolvers
// answer NXDOMAIN for it), allowed by the pod's annotation. The primary
// network's result names the node's resolver (the bridge's "dns"), as an
// interface plugin's may: the kubelet ignores it, and so does doorman.
// containerd passes the pod's servers in the dns capability; doorman makes
// them the sandbox's resolvers and the proxy's: the pod resolves the name
// through the DNS filter and reaches it, and every query for it went to
// the pod's resolver, none to the node's.
func TestCRIPodDNS(t *testing.T) {
	skipUnlessCRI(t)
	const name = "internal.example.test"
	e := newCNIEnv(t)
	internal := e.net.AddHost(name, netip.MustParseAddr("203.0.113.40"))
	clusterDNS := []netip.Addr{e.net.RogueDNS, e.net.RogueDNS6}
	e.net.AnswerOnlyAt(name, clusterDNS...)
	install := func(c *criEnv, confDir string) {
		path := firstCNIConfig(t, confDir)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var list map[string]any
		if err := json.Unmarshal(data, &list); err != nil {
			t.Fatal(err)
		}
		list["plugins"].([]any)[0].(map[string]any)["dns"] = map[string]any{"nameservers": []string{e.net.DNS.String()}}
		if data, err = json.Marshal(list); err != nil {
			t.Fatal(err)
		}
		writeFile(t, path, appendCNIPlugin(t, data, criDoormanEntry(c.e)))
	}
	c := newCRIEnv(t, e, withCRIInstaller(install))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.net.HostNS().LookupHost(ctx, name); err == nil {
		t.Fatalf("the node's resolver knows %s: the test would prove nothing", name)
	}
	nodeQueries := e.net.QueriesAt(e.net.DNS, name) + e.net.QueriesAt(e.net.DNS6, name)

	p := c.mustRunPod(criPodSpec{dns: &criDNS{Servers: []string{clusterDNS[0].String(), clusterDNS[1].String()}},
		annotations: map[string]string{"doorman.io/allowed-hosts": name}})
	assertCRIEnforced(t, c, p)
	s := e.state(&container{key: p.key})
	if !slices.Equal(s.Resolvers, clusterDNS) {
		t.Errorf("resolvers %v, want the pod's dns_config servers %v", s.Resolvers, clusterDNS)
	}
	for _, r := range clusterDNS {
		if !slices.Contains(s.ProxyResolvers, netip.AddrPortFrom(r, 53)) {
			t.Errorf("the proxy resolves through %v, want the pod's resolvers %v", s.ProxyResolvers, clusterDNS)
		}
	}
	ctr := c.startProbe(p)
	if r := c.probe(ctr, "get", "https://"+name+"/pod-dns", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+name+" ") {
		t.Errorf("HTTPS to %s, known to the pod's resolver only: %v", name, r)
	}
	if n := internal.RequestsFor(name); n != 1 {
		t.Errorf("%s served %d requests, want 1", name, n)
	}
	if n := e.net.QueriesAt(e.net.DNS, name) + e.net.QueriesAt(e.net.DNS6, name) - nodeQueries; n != 0 {
		t.Errorf("the node's resolvers got %d queries for %s", n, name)
	}
	if n := e.net.QueriesAt(clusterDNS[0], name) + e.net.QueriesAt(clusterDNS[1], name); n == 0 {
		t.Errorf("the pod's resolver got no query for %s", name)
	}
	e.waitDecision(&container{key: p.key}, decided(name, "allow"))
}

// TestCRIStopRemove follows one pod through `crictl stopp` and `crictl
// rmp`. containerd runs the chain's DEL twice: at stopp with prevResult and
// the pod's netns, at rmp with neither (CNI_NETNS empty); dm-cnilog entries
// record both, at the chain's end and right before doorman's entry (which
// DEL reaches only if doorman's DEL succeeded: libcni stops at the first
// plugin that fails). Both carry the ADD's CNI_ARGS (the pod's namespace,
// name and uid). After stopp the proxy, doorman's state, the
// host-side layer's chain and the pod's netns are gone; after rmp still
// nothing is left, and no pod is listed.
func TestCRIStopRemove(t *testing.T) {
	skipUnlessCRI(t)
	e := newCNIEnv(t)
	net := criDefaultNetwork
	net.logged = true
	c := newCRIEnv(t, e, withCRINetworks(net))

	p := c.mustRunPod(criPodSpec{})
	assertCRIEnforced(t, c, p)
	s := e.state(&container{key: p.key})
	c.startProbe(p)
	st := c.inspectPod(p)
	netnsIno := netnsInode(t, st.Info.PID)
	add := c.cniCalls(net.name, criLogEnd)
	if len(add) != 1 || add[0].Command != "ADD" || add[0].ContainerID != p.id {
		t.Fatalf("calls at the chain's end after runp: %+v, want one ADD for %s", add, p.id)
	}
	netns := add[0].Netns

	step := time.Now()
	if r := c.stopPod(p); r.exit != 0 {
		t.Fatalf("%v\ncontainerd's log:\n%s", r, c.containerdLogTail())
	}
	t.Logf("crictl stopp: %v", time.Since(step).Round(time.Millisecond))
	for _, where := range []string{criLogEnd, criLogBeforeDoorman} {
		calls := c.cniCalls(net.name, where)
		if len(calls) != 2 || calls[1].Command != "DEL" {
			t.Fatalf("calls %s after stopp: %s; want ADD and DEL", where, criCallSummary(calls))
		}
		del := calls[1]
		if !maps.Equal(criCNIArgs(del.Args), criCNIArgs(calls[0].Args)) {
			t.Errorf("DEL at stopp (%s): CNI_ARGS %q, want the ADD's %q", where, del.Args, calls[0].Args)
		}
		if del.ContainerID != p.id || del.Netns != netns || del.IfName != "eth0" || !criHasPrevResult(t, del) {
			t.Errorf("DEL at stopp (%s): container %q netns %q ifname %q prevResult %v; want %s, %s, eth0, a prevResult",
				where, del.ContainerID, del.Netns, del.IfName, criHasPrevResult(t, del), p.id, netns)
		}
	}
	waitGone(t, s.PID)
	assertPodGone(t, e, p)
	if hostLayerHolds(t, e.net.HostPath(), p.key) {
		t.Errorf("the host-side layer still has a chain for %s after stopp", p.key)
	}
	if netnsHeld(netnsIno) {
		t.Errorf("the pod's network namespace (inode %d) is still held after stopp", netnsIno)
	}
	if m := c.sessionMounts(); slices.Contains(m, netns) {
		t.Errorf("the pod's netns %s is still mounted after stopp", netns)
	}

	step = time.Now()
	if r := c.removePod(p); r.exit != 0 {
		t.Fatalf("%v\ncontainerd's log:\n%s", r, c.containerdLogTail())
	}
	t.Logf("crictl rmp: %v", time.Since(step).Round(time.Millisecond))
	for _, where := range []string{criLogEnd, criLogBeforeDoorman} {
		calls := c.cniCalls(net.name, where)
		if len(calls) != 3 || calls[2].Command != "DEL" {
			t.Fatalf("calls %s after rmp: %s; want ADD, DEL, DEL", where, criCallSummary(calls))
		}
		del := calls[2]
		if where == criLogEnd {
			t.Logf("the DEL of crictl rmp, at the chain's end:\n%s", criCallSample(t, del))
		}
		if !maps.Equal(criCNIArgs(del.Args), criCNIArgs(calls[0].Args)) {
			t.Errorf("DEL at rmp (%s): CNI_ARGS %q, want the ADD's %q", where, del.Args, calls[0].Args)
		}
		if del.ContainerID != p.id || del.Netns != "" || del.IfName != "eth0" || criHasPrevResult(t, del) {
			t.Errorf("DEL at rmp (%s): container %q netns %q ifname %q prevResult %v; want %s, no netns, eth0, no prevResult",
				where, del.ContainerID, del.Netns, del.IfName, criHasPrevResult(t, del), p.id)
		}
	}
	assertPodGone(t, e, p)
	if pods := c.mustCrictl("pods", "--quiet"); pods != "" {
		t.Errorf("pods listed after rmp: %s", pods)
	}
	if proxies := proxiesUnder(e.logDir); len(proxies) != 0 {
		t.Errorf("proxy processes of the test left after rmp: %v", proxies)
	}
	// libcni's cache: the result of ADD goes at the first DEL.
	if cached, _ := filepath.Glob("/var/lib/cni/results/*" + p.id + "*"); len(cached) != 0 {
		t.Errorf("libcni's cache still holds %v after rmp", cached)
	}
}

// TestCRIManyPods starts 20 pods in a row, each with a probe container,
// and checks that each one is enforced on its own: its state, its one
// proxy, its ruleset and host-side chain; its allowed request reaches
// apiName and its denied one gets a 403 naming it.
func TestCRIManyPods(t *testing.T) {
	skipUnlessCRI(t)
	const pods = 20
	e := newCNIEnv(t)
	c := newCRIEnv(t, e)

	step := time.Now()
	var all []*criPod
	ctrs := map[string]string{}
	for range pods {
		p := c.mustRunPod(criPodSpec{})
		ctrs[p.id] = c.startProbe(p)
		all = append(all, p)
	}
	t.Logf("%d pods (runp, create, start) in a row: %v", pods, time.Since(step).Round(time.Millisecond))

	step = time.Now()
	proxies := map[int]string{}
	for i, p := range all {
		assertCRIEnforced(t, c, p)
		s := e.state(&container{key: p.key})
		if other, dup := proxies[s.PID]; dup {
			t.Errorf("pod %d (%s) shares proxy %d with %s", i, p.id, s.PID, other)
		}
		proxies[s.PID] = p.id
		if r := c.probe(ctrs[p.id], "get", "https://"+apiName+"/many", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+apiName+" ") {
			t.Errorf("pod %d: allowed HTTPS: %v", i, r)
		}
		if r := c.probe(ctrs[p.id], "get", "http://"+evilName+"/", "--resolve", evilName+":"+evilAddr4.String()); r.exit != 0 ||
			!strings.HasPrefix(r.stdout, "status: 403\n") || !strings.Contains(r.stdout, p.sandboxID()) {
			t.Errorf("pod %d: denied HTTP: want a 403 naming the pod %s, got %v", i, p.sandboxID(), r)
		}
	}
	if n := e.evil.Requests(); n != 0 {
		t.Errorf("%s served %d requests", evilName, n)
	}
	t.Logf("checks of %d pods: %v", pods, time.Since(step).Round(time.Millisecond))

	step = time.Now()
	for _, p := range all {
		if r := c.stopPod(p); r.exit != 0 {
			t.Errorf("%v", r)
		}
		if r := c.removePod(p); r.exit != 0 {
			t.Errorf("%v", r)
		}
	}
	for _, p := range all {
		assertPodGone(t, e, p)
	}
	t.Logf("stopp and rmp of %d pods: %v", pods, time.Since(step).Round(time.Millisecond))
}

// TestCRIRuntimeConfig records what containerd's CRI plugin sends the
// plugins at the end of the chain and right before doorman's entry, both
// declaring doorman's capabilities, for a pod with annotations, a
// dns_config and a port mapping: the interface doorman's Kubernetes
// support builds on. runtimeConfig carries exactly the capabilities
// declared: the pod's annotations under io.kubernetes.cri.pod-annotations,
// its dns_config under dns with capitalised keys (Servers, Searches,
// Options), and from containerd 1.7 on cgroupPath, the pod's cgroup parent
// (containerd 1.6 does not send it); not the port mappings, which only
// portmap declares. CNI_ARGS carry the pod's namespace, name, uid and
// sandbox id; CNI_CONTAINERID is the pod sandbox id, CNI_IFNAME eth0, and
// CNI_NETNS the netns containerd made for the pod.
func TestCRIRuntimeConfig(t *testing.T) {
	skipUnlessCRI(t)
	t.Run("debian", func(t *testing.T) { testCRIRuntimeConfig(t) })
	t.Run("containerd2", func(t *testing.T) {
		skipUnlessContainerd2(t)
		testCRIRuntimeConfig(t, withCRIContainerd(criContainerd2Dir))
	})
}

func testCRIRuntimeConfig(t *testing.T, opts ...criOption) {
	e := newCNIEnv(t)
	net := criDefaultNetwork
	net.logged = true
	c := newCRIEnv(t, e, append(opts, withCRINetworks(net))...)
	version := c.containerdVersion()

	annotations := map[string]string{
		"doorman.io/mode":          "allowlist",
		"doorman.io/allowed-hosts": apiName + "," + otherName,
		"example.com/team":         "ci",
	}
	dns := &criDNS{
		Servers:  []string{e.net.DNS.String(), e.net.DNS6.String()},
		Searches: []string{"team-a.svc.cluster.local", "svc.cluster.local", "cluster.local"},
		Options:  []string{"ndots:5"},
	}
	// A port mapping too, which only portmap's entry declares.
	p := c.mustRunPod(criPodSpec{namespace: "team-a", annotations: annotations, dns: dns,
		ports: []criPortMapping{{ContainerPort: 80, HostPort: 18080}}})
	assertCRIEnforced(t, c, p)

	for _, where := range []string{criLogEnd, criLogBeforeDoorman} {
		calls := c.cniCalls(net.name, where)
		if len(calls) != 1 || calls[0].Command != "ADD" {
			t.Fatalf("calls %s: %s, want one ADD", where, criCallSummary(calls))
		}
		call := calls[0]
		if where == criLogEnd {
			t.Logf("containerd %s sent the chain's last entry:\n%s", version, criCallSample(t, call))
		}
		if call.ContainerID != p.id || call.IfName != "eth0" || !strings.HasPrefix(call.Netns, filepath.Join(c.dir, "state")+"/") ||
			!strings.HasPrefix(filepath.Base(call.Netns), "cni-") {
			t.Errorf("%s: CNI_CONTAINERID %q CNI_IFNAME %q CNI_NETNS %q; want the pod sandbox id %s, eth0, a cni-<uuid> netns under containerd's state dir",
				where, call.ContainerID, call.IfName, call.Netns, p.id)
		}
		if want := filepath.Base(c.cniBinDir); filepath.Base(call.Path) != want {
			t.Errorf("%s: CNI_PATH %q, want the node's plugin directory %s", where, call.Path, c.cniBinDir)
		}
		args := criCNIArgs(call.Args)
		wantArgs := map[string]string{
			"IgnoreUnknown":              "1",
			"K8S_POD_NAMESPACE":          p.namespace,
			"K8S_POD_NAME":               p.name,
			"K8S_POD_UID":                p.uid,
			"K8S_POD_INFRA_CONTAINER_ID": p.id,
		}
		if !maps.Equal(args, wantArgs) {
			t.Errorf("%s: CNI_ARGS %q, want %v", where, call.Args, wantArgs)
		}

		var stdin struct {
			CNIVersion    string                     `json:"cniVersion"`
			Name          string                     `json:"name"`
			Type          string                     `json:"type"`
			Capabilities  map[string]bool            `json:"capabilities"`
			RuntimeConfig map[string]json.RawMessage `json:"runtimeConfig"`
			PrevResult    *struct {
				Interfaces []struct{ Name string }    `json:"interfaces"`
				IPs        []struct{ Address string } `json:"ips"`
			} `json:"prevResult"`
		}
		if err := json.Unmarshal(call.Stdin, &stdin); err != nil {
			t.Fatalf("%s: stdin: %v", where, err)
		}
		if stdin.CNIVersion != "1.0.0" || stdin.Name != net.name || stdin.Type != criLogPlugin || !maps.Equal(stdin.Capabilities, criCapabilities) {
			t.Errorf("%s: cniVersion %q name %q type %q capabilities %v; want 1.0.0, %s, %s, %v",
				where, stdin.CNIVersion, stdin.Name, stdin.Type, stdin.Capabilities, net.name, criLogPlugin, criCapabilities)
		}
		if stdin.PrevResult == nil || len(stdin.PrevResult.IPs) != 2 {
			t.Errorf("%s: prevResult %+v, want the bridge's result with an IPv4 and an IPv6 address", where, stdin.PrevResult)
		}

		wantKeys := []string{"dns", "io.kubernetes.cri.pod-annotations"}
		if version.atLeast(1, 7) {
			wantKeys = append(wantKeys, "cgroupPath")
		}
		if keys := slices.Sorted(maps.Keys(stdin.RuntimeConfig)); !slices.Equal(keys, slices.Sorted(slices.Values(wantKeys))) {
			t.Errorf("%s: runtimeConfig keys %v, want %v (containerd %s)", where, keys, slices.Sorted(slices.Values(wantKeys)), version)
		}
		var gotAnnotations map[string]string
		if err := json.Unmarshal(stdin.RuntimeConfig["io.kubernetes.cri.pod-annotations"], &gotAnnotations); err != nil || !maps.Equal(gotAnnotations, annotations) {
			t.Errorf("%s: runtimeConfig io.kubernetes.cri.pod-annotations %s (%v), want the pod's annotations %v",
				where, stdin.RuntimeConfig["io.kubernetes.cri.pod-annotations"], err, annotations)
		}
		// Exactly these keys: containerd's go-cni DNS struct has no JSON
		// tags, so its field names are the keys.
		var gotDNS map[string][]string
		if err := json.Unmarshal(stdin.RuntimeConfig["dns"], &gotDNS); err != nil ||
			!maps.EqualFunc(gotDNS, map[string][]string{"Servers": dns.Servers, "Searches": dns.Searches, "Options": dns.Options}, slices.Equal) {
			t.Errorf("%s: runtimeConfig dns %s (%v), want {Servers: %v, Searches: %v, Options: %v}",
				where, stdin.RuntimeConfig["dns"], err, dns.Servers, dns.Searches, dns.Options)
		}
		if raw, ok := stdin.RuntimeConfig["cgroupPath"]; ok {
			var cgroup string
			if err := json.Unmarshal(raw, &cgroup); err != nil || cgroup != p.cgroupParent {
				t.Errorf("%s: runtimeConfig cgroupPath %s (%v), want the pod's cgroup parent %q", where, raw, err, p.cgroupParent)
			}
		}
	}
}

// assertCRIEnforced checks that doorman enforces pod p as its CNI plugin
// does a container: its state under <pod sandbox id>-eth0, named
// <namespace>/<pod name> with the pod's uid, one live proxy (the recorded
// one), the ruleset in the pod's network namespace and the host-side
// layer's chain.
func assertCRIEnforced(t *testing.T, c *criEnv, p *criPod) {
	t.Helper()
	s := c.e.state(&container{key: p.key})
	if s.Runtime != "cni" || s.ID != p.sandboxID() || s.PodUID != p.uid || s.Label != "full" || !s.HostLayer || !s.DNSFilter {
		t.Errorf("state of %s: runtime %q id %q pod uid %q label %q, host-side layer %v, DNS filter %v; want cni, %s, %s, full, both layers",
			p.key, s.Runtime, s.ID, s.PodUID, s.Label, s.HostLayer, s.DNSFilter, p.sandboxID(), p.uid)
	}
	if pids := proxiesFor(p.sandboxID()); !slices.Equal(pids, []int{s.PID}) {
		t.Errorf("proxy processes for %s: %v, want the recorded pid %d", p.sandboxID(), pids, s.PID)
	}
	if ok, err := enforce.Present(c.netnsPath(p)); err != nil || !ok {
		t.Errorf("doorman's table in pod %s's namespace: present %v (%v)", p.id, ok, err)
	}
	if !hostLayerHolds(t, c.e.net.HostPath(), p.key) {
		t.Errorf("the host-side layer has no chain for %s", p.key)
	}
}

// assertPodGone checks that pod p has no state in doorman's state dir and
// no proxy process (waiting a little for a proxy to exit).
func assertPodGone(t *testing.T, e *cniEnv, p *criPod) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(e.stateDir, p.key)); !os.IsNotExist(err) {
		t.Errorf("state of %s (%s) left after the pod went: %v", p.key, p.sandboxID(), err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for pids := proxiesFor(p.sandboxID()); len(pids) > 0; pids = proxiesFor(p.sandboxID()) {
		if time.Now().After(deadline) {
			t.Errorf("proxy processes of %s left after the pod went: %v", p.sandboxID(), pids)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// criCounts are the fake internet's counters a pod's traffic could move.
type criCounts struct {
	apiRequests int
	apiUDP      int
	evil        struct{ requests, tcp, udp int }
}

func criCounters(e *cniEnv) criCounts {
	var c criCounts
	c.apiRequests = e.api.RequestsFor(apiName)
	c.apiUDP = e.api.UDPDatagrams(testnet.PortHTTPS)
	c.evil.requests = e.evil.Requests()
	c.evil.tcp = e.evil.Received(testnet.PortRecorder) + e.evil.Connections(testnet.PortRecorder)
	c.evil.udp = e.evil.UDPDatagrams(testnet.PortUDPEcho) + e.evil.UDPDatagrams(testnet.PortHTTPS)
	return c
}

// criHasPrevResult reports whether the call's stdin carries a prevResult.
func criHasPrevResult(t *testing.T, call criCNICall) bool {
	t.Helper()
	var stdin struct {
		PrevResult json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(call.Stdin, &stdin); err != nil {
		t.Fatalf("stdin of %s: %v", call.Command, err)
	}
	return len(stdin.PrevResult) > 0 && string(stdin.PrevResult) != "null"
}

// criCNIArgs parses CNI_ARGS ("K=V;K=V", in any order).
func criCNIArgs(s string) map[string]string {
	args := map[string]string{}
	for _, kv := range strings.Split(s, ";") {
		k, v, _ := strings.Cut(kv, "=")
		args[k] = v
	}
	return args
}

// criCallSummary is calls as "ADD(netns, prevResult) DEL(...)", for a
// failure message.
func criCallSummary(calls []criCNICall) string {
	var parts []string
	for _, call := range calls {
		parts = append(parts, fmt.Sprintf("%s(container %.12s, netns %q, %d bytes of stdin)", call.Command, call.ContainerID, call.Netns, len(call.Stdin)))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// criCallSample renders a call for the test log: its CNI_* variables and
// its stdin, indented.
func criCallSample(t *testing.T, call criCNICall) string {
	t.Helper()
	var stdin any
	json.Unmarshal(call.Stdin, &stdin)
	pretty, err := json.MarshalIndent(map[string]any{
		"CNI_COMMAND": call.Command, "CNI_CONTAINERID": call.ContainerID, "CNI_NETNS": call.Netns,
		"CNI_IFNAME": call.IfName, "CNI_ARGS": call.Args, "CNI_PATH": call.Path, "stdin": stdin,
	}, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return string(pretty)
}

// processCgroups is the cgroup of process pid in each hierarchy
// (/proc/PID/cgroup: "controllers:path").
func processCgroups(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatalf("cgroups of pid %d: %v", pid, err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// ID:CONTROLLERS:PATH
		if f := strings.SplitN(line, ":", 3); len(f) == 3 {
			out[f[1]] = f[2]
		}
	}
	return out
}

// TestCRIPodCgroup: on a containerd that passes the cgroupPath
// capability (2.x; Debian's 1.6 does not), the pod's proxy and its
// supervisor run below the pod's cgroup in every hierarchy that holds
// memory, pids or cpu, so that they count against the pod's limits; rmp
// removes the proxy's cgroup and the pod's goes with the pod.
func TestCRIPodCgroup(t *testing.T) {
	skipUnlessCRI(t)
	skipUnlessContainerd2(t)
	e := newCNIEnv(t)
	c := newCRIEnv(t, e, withCRIContainerd(criContainerd2Dir))
	p := c.mustRunPod(criPodSpec{annotations: map[string]string{"doorman.io/allowed-hosts": apiName}})
	assertCRIEnforced(t, c, p)
	s := e.state(&container{key: p.key})
	if s.CgroupParent != p.cgroupParent {
		t.Fatalf("recorded cgroup parent %q, want the pod's %q", s.CgroupParent, p.cgroupParent)
	}
	if s.Cgroup == nil || s.Cgroup.Slice || s.Cgroup.Parent != p.cgroupParent || !strings.HasPrefix(s.Cgroup.Path, p.cgroupParent+"/") {
		t.Fatalf("recorded proxy cgroup %+v, want one below the pod's %s", s.Cgroup, p.cgroupParent)
	}
	pids := map[string]int{"proxy": s.PID}
	if s.Supervisor != nil {
		pids["supervisor"] = s.Supervisor.PID
	} else {
		t.Error("no supervisor recorded")
	}
	for who, pid := range pids {
		cgroups := processCgroups(t, pid)
		for ctrls, path := range cgroups {
			// The unified hierarchy ("") holds the controllers only on a
			// cgroup v2 host; on a hybrid one (these machines) it holds
			// none and doorman leaves it alone.
			unifiedOnly := ctrls == "" && len(cgroups) == 1
			for _, ctrl := range strings.Split(ctrls, ",") {
				if (ctrl == "memory" || ctrl == "pids" || ctrl == "cpu" || unifiedOnly) && !strings.HasPrefix(path, p.cgroupParent+"/") {
					t.Errorf("the %s (pid %d) is in %s cgroup %s, not below the pod's %s", who, pid, cmp.Or(ctrls, "unified"), path, p.cgroupParent)
				}
			}
		}
	}
	if show := e.mustCLI("show", p.id).stdout; !strings.Contains(show, p.cgroupParent) {
		t.Errorf("show does not name the pod's cgroup %s:\n%s", p.cgroupParent, show)
	}
	c.mustCrictl("stopp", p.id)
	c.mustCrictl("rmp", p.id)
	assertPodGone(t, e, p)
	for _, ctrl := range []string{"memory", "pids", "cpu"} {
		if d, ok := cgroupDir(t, ctrl, s.Cgroup.Path); ok && dirExists(d) {
			t.Errorf("the proxy's cgroup %s is left after rmp", d)
		}
	}
}
