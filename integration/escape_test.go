package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
)

// writeSecurityDocEnv, set to 1, makes TestEscape write docs/security.md
// from its results instead of failing on escapes the labels do not admit.
const writeSecurityDocEnv = "DOORMAN_WRITE_SECURITY_DOC"

// escapeHold is how long the silent attempt holds its connections: the
// proxy's default sniff timeout (10 s, which the sandboxes here keep) and
// a second more, so that the proxy has decided on every one of them.
const escapeHold = 11 * time.Second

// escapeMode is a column of the matrix: what the workload may do.
type escapeMode int

const (
	// modeDefaultCaps: Docker's default capabilities (CAP_NET_RAW, no
	// CAP_NET_ADMIN), rules untouched.
	modeDefaultCaps escapeMode = iota
	// modeFlushed: CAP_NET_ADMIN too, and the probe deleted every nftables
	// table in its own namespace before the attempts.
	modeFlushed
)

var escapeModes = []escapeMode{modeDefaultCaps, modeFlushed}

func (m escapeMode) String() string {
	if m == modeFlushed {
		return "CAP_NET_ADMIN, own ruleset flushed"
	}
	return "Docker's default capabilities"
}

// escapeAttempt is a row of the matrix: one way out that the probe
// (integration/escape) tries.
type escapeAttempt struct {
	id    string // the probe's name for it
	title string
	// needs is the capability the attempt needs beyond what any process
	// has ("" for none). An escape is honest only when the sandbox's label
	// says it is partial for a reason that covers this capability.
	needs string
	// allowed is the traffic the policy admits while the attempt runs
	// (the real allowed host answering a spoofed SNI, say): not an escape.
	allowed func(escapeWorld) counters
	// watch, if set, starts measuring in the sandbox's surroundings just
	// before the probe runs the attempt (sending the runtime namespace's
	// own traffic, say, and watching where it goes); the function it
	// returns stops that once the probe is done and says what arrived
	// where it must not, and what the measurement saw.
	watch func(t *testing.T, w escapeWorld, s *escapeSandbox) (stop func() (counters, string))
	// afterSilent runs the attempt once the silent attempt is over: its
	// watch changes what the silent connections would meet (the policy's
	// mode).
	afterSilent bool
}

// unlimited is an allowance without bound.
const unlimited = 1 << 40

var escapeAttempts = []escapeAttempt{
	{id: "tcp", title: "TCP to a non-allowed IP"},
	{id: "sni-spoof", title: "TLS with an allowed SNI to a non-allowed IP", allowed: func(w escapeWorld) counters {
		// The proxy dials the name: the real allowed host answers.
		return counters{tcpKey(w.api, testnet.PortHTTPS, "bytes"): unlimited, tcpKey(w.api, testnet.PortHTTPS, "connections"): unlimited,
			requestsKey(w.api, apiName): unlimited}
	}},
	{id: "h2c", title: "h2c (HTTP/2 prior knowledge) to a non-allowed IP"},
	{id: "keepalive-host", title: "keep-alive connection switching Host to a non-allowed name", allowed: func(w escapeWorld) counters {
		// The first request, for the allowed name, is admitted.
		return counters{tcpKey(w.api, testnet.PortHTTP, "bytes"): unlimited, tcpKey(w.api, testnet.PortHTTP, "connections"): unlimited,
			requestsKey(w.api, apiName): 1}
	}},
	{id: "absolute-uri", title: "absolute URI naming a non-allowed host, Host allowed"},
	{id: "connect", title: "HTTP CONNECT to a non-allowed host"},
	{id: "udp", title: "UDP datagram"},
	{id: "quic", title: "QUIC (UDP 443), to an allowed and a non-allowed host"},
	{id: "dns-rogue", title: "DNS to a server that is not the resolver"},
	{id: "dns-tunnel", title: "DNS tunnelling (TXT queries under a non-allowed zone, via the resolver)", needs: gapDNSNeeds},
	{id: "raw-ip", title: "raw IP socket (IPPROTO_RAW, raw UDP)", needs: "CAP_NET_RAW"},
	{id: "af-packet", title: "AF_PACKET frame to the gateway's MAC", needs: "CAP_NET_RAW"},
	{id: "so-mark", title: "SO_MARK set to every mark in the host's rulesets", needs: "CAP_NET_RAW"},
	{id: "ipv6", title: "IPv6 to a non-allowed IP"},
	{id: "ipv4-mapped", title: "IPv4-mapped IPv6 (::ffff:a.b.c.d) to a non-allowed IP"},
	{id: "proxy-port", title: "connection straight to the proxy's listener port"},
	{id: "icmp", title: "ICMP requests with 1000-byte payloads (echo, timestamp, information, address mask; raw and ping sockets; ICMPv6 echo)"},
	{id: "icmp-lan", title: "the same ICMP to the host's LAN and to a neighbour sandbox on the bridge",
		watch: withFrames(nil)},
	{id: "router-advert", title: "IPv6 router advertisements to the link (default route, autonomous prefix)", needs: "CAP_NET_RAW",
		watch: withFrames(routerAdvertWatch)},
	{id: "rebind", title: "an allowed wildcard name whose DNS answers private addresses (LAN, neighbour, CGNAT, metadata, ULA)"},
	{id: "arp-spoof", title: "ARP and neighbour advertisements claiming a neighbour's addresses", needs: "CAP_NET_RAW",
		allowed: spoofAllowed, watch: withFrames(spoofWatch(false))},
	{id: "ip-spoof", title: "a neighbour's IP taken, answering the runtime's connections to it", needs: "CAP_NET_ADMIN",
		allowed: spoofAllowed, watch: withFrames(spoofWatch(true))},
	{id: "arp-trailer", title: "ARP requests and gratuitous replies with 1000 bytes after the ARP packet, broadcast and to a neighbour's MAC",
		needs: "CAP_NET_RAW", watch: withFrames(nil)},
	{id: "mld-aux", title: "MLD reports carrying 1000 bytes (MLDv2 auxiliary data, bytes after an MLDv1 report)",
		needs: "CAP_NET_RAW", watch: withFrames(nil)},
	{id: "nd-options", title: "neighbour and router solicitations and advertisements to all nodes and routers with a 1000-byte unknown option",
		needs: "CAP_NET_RAW", watch: withFrames(nil)},
	{id: "l2-flood", title: "frames of an unknown ethertype broadcast, multicast and to a neighbour's MAC; well-formed neighbour solicitations carrying data, to all nodes and to the neighbour",
		needs: "CAP_NET_RAW", watch: withFrames(nil)},
	{id: "http-desync", title: "a response body line `HTTP/1.1 101` while a WebSocket upgrade is outstanding, then another Host", allowed: func(w escapeWorld) counters {
		// The first two requests, for the allowed name, are admitted.
		return counters{tcpKey(w.api, testnet.PortHTTP, "bytes"): unlimited, tcpKey(w.api, testnet.PortHTTP, "connections"): unlimited,
			requestsKey(w.api, apiName): 2}
	}},
	{id: "h2c-upgrade", title: "an accepted `Upgrade: h2c`, then HTTP/2 with a non-allowed :authority", allowed: func(w escapeWorld) counters {
		// The upgrade request, for the allowed name, is admitted.
		return counters{tcpKey(w.api, testnet.PortHTTP, "bytes"): unlimited, tcpKey(w.api, testnet.PortHTTP, "connections"): unlimited,
			requestsKey(w.api, apiName): 1}
	}},
	{id: "rebind-nat64", title: "an allowed wildcard name whose AAAA is a LAN address in the local-use NAT64 prefix 64:ff9b:1::/48, laid out for a /48, /56 and /64 prefix"},
	{id: "open-nat64", title: "`mode: open`, TCP straight to those NAT64 addresses", watch: modeOpenWatch, afterSilent: true},
	{id: "silent", title: "silent connections held open to exhaust the proxy"},
}

// escapeSandbox is one sandbox of a kind, in one mode, ready for the probe.
type escapeSandbox struct {
	mode escapeMode
	// probe runs the escape probe inside the sandbox with args and returns
	// its standard output.
	probe func(ctx context.Context, args ...string) (string, error)
	// state is doorman's record of the sandbox: its label and proxy ports.
	state *sandbox.State
	// nsPath is the sandbox's network namespace as the test can open it.
	nsPath string
	// runtimeNS are the namespaces around the sandbox whose rulesets may
	// hold exemptions by mark.
	runtimeNS []string
	// logFile is the sandbox's decision log as the test can read it.
	logFile string
	// mac is the MAC of the sandbox's eth0 and peer the index of its
	// veth's other end in the runtime's namespace (read before the probe
	// runs; see attackerLink).
	mac  net.HardwareAddr
	peer int
}

// probeRow is one line of the probe's output.
type probeRow struct {
	Attempt   string `json:"attempt"`
	SentBytes int    `json:"sent_bytes"`
	Error     string `json:"error"`
	Detail    string `json:"detail"`
}

// outcome is the probe's own account, for the table's details.
func (r probeRow) outcome() string {
	var parts []string
	if r.Error != "" {
		parts = append(parts, r.Error)
	}
	if r.Detail != "" {
		parts = append(parts, r.Detail)
	}
	return strings.Join(parts, "; ")
}

// escapeResult is one cell of the matrix.
type escapeResult struct {
	attempt escapeAttempt
	probe   probeRow
	arrived counters // what reached the fake internet beyond what the policy admits
	seen    string   // what the attempt's watch measured, for the details
}

// escapeColumn is one sandbox's run of every attempt.
type escapeColumn struct {
	mode      escapeMode
	label     string
	dnsFilter bool   // the sandbox's DNS goes through the proxy's filter
	caps      string // the probe's effective capabilities
	flush     string // what the probe's flush did
	control   string // the allowed request's outcome
	// rulesetMarks are the marks found in the rulesets around the sandbox;
	// the probe tries these and defaultMarks.
	rulesetMarks []uint32
	results      []escapeResult
	duration     time.Duration
}

// verdict says whether r is acceptable under the column's label: nothing
// arrived, or the label admits the path the attempt took.
func (col *escapeColumn) verdict(r escapeResult) (ok bool, why string) {
	if r.arrived.zero() {
		return true, ""
	}
	needs := r.attempt.needs
	if col.mode == modeFlushed && needs != gapDNSNeeds {
		needs = "CAP_NET_ADMIN"
	}
	if col.mode == modeFlushed && needs == gapDNSNeeds && labelAdmits(col.label, "CAP_NET_ADMIN") {
		return true, ""
	}
	if labelAdmits(col.label, needs) {
		return true, ""
	}
	if needs == "" {
		return false, "needs no capability; no label admits it"
	}
	return false, fmt.Sprintf("label %q does not admit a workload with %s", col.label, needs)
}

// gapDNSNeeds marks an attempt that needs no capability, only DNS that
// goes to the resolvers unfiltered: a label that names that gap admits it.
const gapDNSNeeds = "unfiltered DNS"

// labelAdmits reports whether a partial label names an uncovered path that
// a workload holding capability c can take. Holding CAP_NET_ADMIN, or
// rules that exist only inside the namespace, include the CAP_NET_RAW
// paths (AF_PACKET frames, SO_MARK).
func labelAdmits(label, c string) bool {
	if !strings.HasPrefix(label, "partial (") {
		return false
	}
	switch c {
	case gapDNSNeeds:
		return strings.Contains(label, "DNS to the resolvers is not filtered")
	case "CAP_NET_ADMIN":
		return strings.Contains(label, "CAP_NET_ADMIN")
	case "CAP_NET_RAW":
		return strings.Contains(label, "CAP_NET_RAW") || strings.Contains(label, "CAP_NET_ADMIN") ||
			strings.Contains(label, "in-namespace rules only")
	}
	return false
}

// escapeKind is a table of the report: one kind of sandbox in both modes.
type escapeKind struct {
	name    string
	setup   string // how the sandbox is made and the probe run
	skipped string // why it did not run, if it did not
	columns []*escapeColumn
}

// escapeReport collects the tables of docs/security.md.
type escapeReport struct {
	mu    sync.Mutex
	kinds []*escapeKind
}

func (r *escapeReport) add(k *escapeKind) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kinds = append(r.kinds, k)
}

// TestEscape is the escape suite: a static probe, root inside a sandbox,
// tries every way out in the list above towards the test's fake internet,
// whose servers count what arrives. It runs for a CNI sandbox, a CNI
// sandbox with both opt-in layers (DNS filter and host-side layer, whose
// label must be full), a Docker container and a container of a Docker
// daemon inside a doorman sandbox (DinD), each with Docker's default capabilities and again with
// CAP_NET_ADMIN after deleting its own ruleset. A row passes when nothing
// arrived, or when the sandbox's label honestly says its enforcement is
// partial for the capability the attempt used; the positive control (an
// allowed request) must succeed with default capabilities, so that "0
// bytes" means blocked, not broken.
//
// With DOORMAN_WRITE_SECURITY_DOC=1 it writes the matrix to
// docs/security.md and reports rows the labels do not admit without
// failing.
func TestEscape(t *testing.T) {
	skipUnlessRoot(t)
	begin := time.Now()
	writeDoc := os.Getenv(writeSecurityDocEnv) == "1"
	bin := buildEscapeProbe(t)
	report := &escapeReport{}

	t.Run("cni", func(t *testing.T) { report.add(escapeCNI(t, bin, writeDoc)) })
	t.Run("cni-bare", func(t *testing.T) { report.add(escapeCNIBare(t, bin, writeDoc)) })
	t.Run("gvisor", func(t *testing.T) { report.add(escapeGVisor(t, bin, writeDoc)) })
	t.Run("docker", func(t *testing.T) {
		for _, tool := range []string{"dockerd", "runc", "containerd"} {
			if _, err := exec.LookPath(tool); err != nil {
				reason := fmt.Sprintf("%s is not installed", tool)
				report.add(&escapeKind{name: escapeKindDocker, skipped: reason})
				report.add(&escapeKind{name: escapeKindDinD, skipped: reason})
				t.Skip(reason)
			}
		}
		d := newDockerEnv(t)
		escapeDockerDefaults(t, d)
		lan := newEscapeLAN(t, d.net)
		routeLANFromRoot(t, d.net)
		image := importEscapeImage(t, d, bin)
		t.Run("container", func(t *testing.T) { report.add(escapeDocker(t, d, lan, image, writeDoc)) })
		t.Run("dind", func(t *testing.T) { report.add(escapeDinD(t, d, lan, image, writeDoc)) })
	})
	t.Logf("total: %v", time.Since(begin).Round(time.Millisecond))

	if writeDoc {
		if t.Failed() {
			t.Fatalf("not writing docs/security.md: the suite itself failed")
		}
		path := filepath.Join("..", "docs", "security.md")
		if err := os.WriteFile(path, []byte(renderSecurityDoc(report)), 0o644); err != nil {
			t.Fatalf("write %s: %v", path, err)
		}
		t.Logf("wrote %s", path)
	}
}

// runEscapeColumn runs the probe's attempts in s one after another,
// reading the fake internet's counters before and after each, with the
// silent attempt running alongside (it alone aims at evil's port 22, so
// its counters are its own). It checks the probe's capabilities, the
// flush and the positive control, and reports each row that escaped
// without a label to match (as an error, or a log line when writeDoc).
func runEscapeColumn(t *testing.T, w escapeWorld, s *escapeSandbox, writeDoc bool) *escapeColumn {
	t.Helper()
	begin := time.Now()
	col := &escapeColumn{mode: s.mode, label: s.state.Label, dnsFilter: s.state.DNSFilter}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(args ...string) (probeRow, error) {
		out, err := s.probe(ctx, args...)
		if err != nil {
			return probeRow{}, err
		}
		return parseProbeRow(out)
	}

	caps, err := run("caps")
	if err != nil {
		t.Fatalf("probe caps: %v", err)
	}
	col.caps = caps.Detail
	if s.nsPath != "" {
		if s.mac, s.peer, err = attackerLink(s.nsPath); err != nil {
			t.Errorf("the sandbox's eth0 in %s: %v", s.nsPath, err)
		}
	}
	hasCap := func(c string) bool { return strings.Contains(","+caps.Detail+",", ","+c+",") }
	if !hasCap("CAP_NET_RAW") || hasCap("CAP_NET_ADMIN") != (s.mode == modeFlushed) {
		t.Errorf("%s: the probe's effective capabilities are %s", s.mode, caps.Detail)
	}
	// Marks first: the sandbox's own ruleset is gone after a flush.
	found, err := rulesetMarks(append(s.runtimeNS, s.nsPath)...)
	if err != nil {
		t.Errorf("marks: %v", err)
	}
	col.rulesetMarks = found
	marks := probeMarks(found)
	if s.mode == modeFlushed {
		fl, err := run("flush")
		if err != nil || fl.Error != "" || !strings.HasSuffix(fl.Detail, "; 0 tables left") {
			t.Fatalf("probe flush: %v %+v", err, fl)
		}
		col.flush = fl.Detail
		if s.nsPath != "" {
			if ok, err := enforce.Present(s.nsPath); err != nil || ok {
				t.Fatalf("doorman's table after the probe's flush: present %v, %v", ok, err)
			}
		}
	}
	// Clipped: the silent attempt's goroutine and the loop below append to it.
	args := slices.Clip(escapeProbeArgs(w, s.state, marks))
	before := w.settledSnapshot()
	ctl, err := run(append(args, "control")...)
	if err != nil {
		t.Fatalf("probe control: %v", err)
	}
	col.control = ctl.outcome()
	after := w.settledSnapshot()
	apiRequests := requestsKey(w.api, apiName)
	if s.mode == modeDefaultCaps && (!strings.Contains(ctl.Detail, "HTTP 200") || after[apiRequests] <= before[apiRequests]) {
		t.Fatalf("positive control: an allowed request to %s did not get through (%s); every 0 below would be meaningless", apiName, col.control)
	}

	// The silent attempt runs alongside the others: it holds its
	// connections for escapeHold.
	silentPort := tcpKey(w.evil, testnet.PortSSH, "")
	isSilent := func(k counterKey) bool { return k.where == silentPort.where }
	silentBefore := w.snapshot()
	type silentOut struct {
		row probeRow
		err error
	}
	silentDone := make(chan silentOut, 1)
	go func() {
		r, err := run(append(args, "silent")...)
		silentDone <- silentOut{r, err}
	}()

	runAttempt := func(a escapeAttempt) {
		before := w.settledSnapshot()
		var stop func() (counters, string)
		if a.watch != nil {
			stop = a.watch(t, w, s)
		}
		r, err := run(append(args, a.id)...)
		var watched counters
		var seen string
		if stop != nil {
			watched, seen = stop()
		}
		if err != nil {
			t.Fatalf("probe %s: %v", a.id, err)
		}
		var allowed counters
		if a.allowed != nil {
			allowed = a.allowed(w)
		}
		arrived := w.settledSnapshot().since(before, allowed, isSilent)
		maps.Copy(arrived, watched.since(nil, nil, nil))
		col.results = append(col.results, escapeResult{attempt: a, probe: r, arrived: arrived, seen: seen})
	}
	for _, a := range escapeAttempts {
		if a.id != "silent" && !a.afterSilent {
			runAttempt(a)
		}
	}
	so := <-silentDone
	if so.err != nil {
		t.Fatalf("probe silent: %v", so.err)
	}
	silentArrived := w.settledSnapshot().since(silentBefore, nil, func(k counterKey) bool { return !isSilent(k) })
	col.results = append(col.results, escapeResult{attempt: escapeAttemptByID("silent"), probe: so.row, arrived: silentArrived})
	for _, a := range escapeAttempts {
		if a.afterSilent {
			runAttempt(a)
		}
	}
	// In the table's order.
	slices.SortStableFunc(col.results, func(a, b escapeResult) int {
		return escapeAttemptIndex(a.attempt.id) - escapeAttemptIndex(b.attempt.id)
	})
	col.duration = time.Since(begin)

	for _, r := range col.results {
		if ok, why := col.verdict(r); !ok {
			msg := fmt.Sprintf("%s, %s: escaped (%s at %s): %s; the probe saw: %s", s.mode, r.attempt.title,
				r.arrived.summary(), r.arrived.where(), why, r.probe.outcome())
			if writeDoc {
				t.Log(msg)
			} else {
				t.Error(msg)
			}
		}
	}
	t.Logf("%s: label %q, marks in the rulesets %v, %v", s.mode, col.label, formatMarks(found), col.duration.Round(time.Millisecond))
	return col
}

// escapeAttemptIndex is the position of the attempt id in escapeAttempts.
func escapeAttemptIndex(id string) int {
	return slices.IndexFunc(escapeAttempts, func(a escapeAttempt) bool { return a.id == id })
}

// escapeAttemptByID is the attempt id of escapeAttempts.
func escapeAttemptByID(id string) escapeAttempt { return escapeAttempts[escapeAttemptIndex(id)] }

// parseProbeRow reads the probe's last output line.
func parseProbeRow(out string) (probeRow, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var r probeRow
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		return r, fmt.Errorf("probe output %q: %w", out, err)
	}
	return r, nil
}

// escapeProbeArgs are the probe's flags: the fake internet's addresses and
// ports, the sandbox's proxy ports and the marks to try.
func escapeProbeArgs(w escapeWorld, s *sandbox.State, marks []uint32) []string {
	var ms []string
	for _, m := range marks {
		ms = append(ms, fmt.Sprintf("%#x", m))
	}
	port := func(p int) string { return strconv.Itoa(p) }
	args := []string{
		"-allowed-name", apiName, "-allowed4", apiAddr4.String(),
		"-denied-name", evilName, "-denied4", evilAddr4.String(), "-denied6", evilAddr6.String(),
		"-http-port", port(testnet.PortHTTP), "-https-port", port(testnet.PortHTTPS),
		"-tcp-port", port(testnet.PortRecorder), "-mark-port", port(testnet.PortPostgres),
		"-silent-port", port(testnet.PortSSH), "-udp-port", port(testnet.PortUDPEcho), "-quic-port", port(testnet.PortHTTPS),
		"-resolver", w.net.DNS.String(), "-rogue-dns", w.net.RogueDNS.String() + "," + w.net.RogueDNS6.String(),
		"-tunnel-zone", testnet.TunnelZone,
		"-proxy-ports", fmt.Sprintf("%d,%d", s.Port4, s.Port6),
		"-marks", strings.Join(ms, ","),
		"-hold", escapeHold.String(), "-silent-conns", "200", "-timeout", "1s",
		"-lan", strings.Join(addrStrings(escapeICMPLAN), ","), "-rebind", strings.Join(w.rebind, ","),
		"-rebind-nat64", strings.Join(w.rebindNAT64, ","), "-nat64", strings.Join(addrStrings(w.nat64), ","),
		"-redis-port", port(testnet.PortRedis), "-spoof-port", port(escapeSpoofPort),
		"-ra-prefix", escapeRAPrefix.String(), "-spoof-time", escapeSpoofTime.String(),
	}
	if w.nbr != nil {
		if w.nbr.addr4.IsValid() {
			args = append(args, "-neighbour4", w.nbr.addr4.String())
		}
		if w.nbr.addr6.IsValid() {
			args = append(args, "-neighbour6", w.nbr.addr6.String())
		}
		if w.nbr.mac != nil {
			args = append(args, "-neighbour-mac", w.nbr.mac.String())
		}
	}
	return args
}

func addrStrings(addrs []netip.Addr) []string {
	var out []string
	for _, a := range addrs {
		out = append(out, a.String())
	}
	return out
}

// buildEscapeProbe builds the static probe for the whole test.
func buildEscapeProbe(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "escape")
	build := exec.Command("go", "build", "-o", bin, "github.com/doorman-net/doorman/integration/escape")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the escape probe: %v\n%s", err, out)
	}
	return bin
}
