package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/ca"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
	"github.com/doorman-net/doorman/spec"
)

// Sizes of BenchmarkInspect: each round runs every path once per
// metric, in rotating order.
const (
	inspectBenchRounds     = 5
	inspectBenchRateTime   = time.Second // one requests/s measurement
	inspectBenchClients    = 8           // concurrent clients in a requests/s measurement
	inspectBenchSamples    = 200         // sequential requests per latency measurement
	inspectBenchNewSamples = 100         // sequential new connections per latency measurement
	inspectBenchMitmPort   = 8089        // mitmproxy's transparent port in the host namespace
	inspectBenchTable      = "dm-bench-inspect"
	inspectBenchName       = "llm.example.test"
	inspectBenchPlainName  = "plain.example.test"
)

var (
	inspectBenchAddr      = netip.MustParseAddr("203.0.113.81")
	inspectBenchPlainAddr = netip.MustParseAddr("203.0.113.82")
)

// inspectBenchBody is the request every path sends: a model API call
// without a server-side tool, which the rule must parse and let pass.
const inspectBenchBody = `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"bash_20250124","name":"bash"}]}`

// inspectPath is one way from a client to the inspected host.
type inspectPath struct {
	name   string
	sb     *testnet.Sandbox
	host   string // the name the client asks for
	roots  *x509.CertPool
	client func(keepAlive bool) *http.Client
	// denyPath and denyBody make a POST the path's rule must refuse
	// with 403, checked before measuring; "" for a path with no rule.
	denyPath, denyBody string
}

// inspectBenchToolBody is a request with a server-side web-search tool:
// the rule refuses it.
const inspectBenchToolBody = `{"model":"m","tools":[{"type":"web_search_20250305"}]}`

// BenchmarkInspect measures a request-level rule on an inspected host:
// doorman (TLS terminated, a deny rule on POST /v1/messages whose JSON
// body names a web-search tool, which every request here passes after the
// body is parsed) beside the same requests made directly, spliced by
// the same doorman proxy to an uninspected host, spliced by a doorman
// proxy with no request rules (and by an older doorman binary's, named by
// DOORMAN_BENCH_BASELINE, which then also inspects the host by the same
// rule, for a before and after of the inspected relay), through Squid 5's ssl_bump in bump mode
// (with the method and path part of the rule: Squid's ACLs cannot read a
// body) and through mitmproxy in transparent mode with an addon doing the
// whole rule, each where installed: requests per second with 8 clients
// and p50/p99 latency, on keep-alive connections and on a new TLS
// connection per request. Added latency is a path's minus direct's;
// ratios of rates are paired round by round. Every path with a rule is
// first shown to refuse what its rule refuses. Run
// it with -benchtime=1x; see docs/benchmarks.md.
func BenchmarkInspect(b *testing.B) {
	skipUnlessRootB(b)
	n := testnet.New(b)
	n.AddHost(inspectBenchName, inspectBenchAddr)
	n.AddHost(inspectBenchPlainName, inspectBenchPlainAddr)
	dir := b.TempDir()
	testCA := x509.NewCertPool()
	testCA.AppendCertsFromPEM(n.CAPEM)
	caFile := n.WriteCA(dir)

	direct := &inspectPath{name: "direct", sb: n.NewSandbox(b), host: inspectBenchName, roots: testCA}
	paths := []*inspectPath{direct}

	// doorman: one sandbox, enforced as the CNI plugin would, inspecting
	// one host and splicing the other; another with no request rules at
	// all (as before issue 18), and the same by an older binary if named.
	rule := "inspect " + inspectBenchName + " deny POST /v1/messages json:tools[].type=web_search*\n"
	caDir := filepath.Join(dir, "ca", "bench")
	enforced := enforceInspectBench(b, n, dir, "rules", rule, caDir, caFile, doormanBin())
	caPEM, err := ca.CertPEM(caDir)
	if err != nil {
		b.Fatal(err)
	}
	doormanRoots := x509.NewCertPool()
	doormanRoots.AppendCertsFromPEM(caPEM)
	paths = append(paths,
		&inspectPath{name: "doorman inspected", sb: enforced, host: inspectBenchName, roots: doormanRoots,
			denyPath: "/v1/messages", denyBody: inspectBenchToolBody},
		&inspectPath{name: "doorman spliced", sb: enforced, host: inspectBenchPlainName, roots: testCA},
		&inspectPath{name: "doorman, no rules", sb: enforceInspectBench(b, n, dir, "norules", "", "", "", doormanBin()),
			host: inspectBenchPlainName, roots: testCA})
	// An older doorman (benchBaselineEnv) relays the "no rules" path a
	// second time, so that one run shows whether this tree changed what
	// uninspected hosts cost.
	if _, bin := benchBaselineBinary(b); bin != "" {
		paths = append(paths, &inspectPath{name: "doorman, no rules, baseline",
			sb: enforceInspectBench(b, n, dir, "baseline", "", "", "", bin), host: inspectBenchPlainName, roots: testCA})
		// The older binary inspecting too, for a before and after of
		// the inspected relay in the same run.
		baseCADir := filepath.Join(dir, "ca", "bench-baseline")
		baseSB := enforceInspectBench(b, n, dir, "rules-baseline", rule, baseCADir, caFile, bin)
		basePEM, err := ca.CertPEM(baseCADir)
		if err != nil {
			b.Fatal(err)
		}
		baseRoots := x509.NewCertPool()
		baseRoots.AppendCertsFromPEM(basePEM)
		paths = append(paths, &inspectPath{name: "doorman inspected, baseline", sb: baseSB, host: inspectBenchName, roots: baseRoots,
			denyPath: "/v1/messages", denyBody: inspectBenchToolBody})
	} else {
		b.Logf("%s is not set: no older doorman to compare the uninspected relay with", benchBaselineEnv)
	}

	redirects := map[string]uint16{} // a peer's sandbox's host interface → its port
	if p := startSquidBump(b, n, caFile); p != nil {
		paths = append(paths, p)
		redirects[p.sb.HostIface] = squidInterceptPort
	}
	if p := startMitmproxy(b, n, caFile); p != nil {
		paths = append(paths, p)
		redirects[p.sb.HostIface] = inspectBenchMitmPort
	}
	if len(redirects) > 0 {
		if err := applyBenchRedirects(n.HostPath(), redirects); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { removeBenchRedirects(n.HostPath()) })
	}
	for _, p := range paths {
		p.client = inspectBenchClient(p)
		if err := p.check(); err != nil {
			b.Fatalf("%s: %v", p.name, err)
		}
		if err := p.checkDenies(); err != nil {
			b.Fatalf("%s: the rule is not in force: %v", p.name, err)
		}
	}
	time.Sleep(benchSettleTime)

	type metric struct {
		name string
		run  func(p *inspectPath) []float64 // one sample or many
	}
	metrics := []metric{
		{"keep-alive req/s", func(p *inspectPath) []float64 { return []float64{p.rate(true)} }},
		{"keep-alive latency", func(p *inspectPath) []float64 { return p.latency(true, inspectBenchSamples) }},
		{"new-conn req/s", func(p *inspectPath) []float64 { return []float64{p.rate(false)} }},
		{"new-conn latency", func(p *inspectPath) []float64 { return p.latency(false, inspectBenchNewSamples) }},
	}
	results := make([][][]float64, len(metrics)) // metric, path, samples
	for m := range metrics {
		results[m] = make([][]float64, len(paths))
	}
	benchRotate(inspectBenchRounds, len(paths), func(r, pi int) {
		for m, mt := range metrics {
			results[m][pi] = append(results[m][pi], mt.run(paths[pi])...)
		}
	})

	var out strings.Builder
	fmt.Fprintf(&out, "BenchmarkInspect: %d rounds, paths in rotating order; %d cores; %d clients for req/s; HTTP/1.1 over TLS 1.3, POST of %d bytes of JSON\n\n",
		inspectBenchRounds, runtime.NumCPU(), inspectBenchClients, len(inspectBenchBody))
	out.WriteString("| path | keep-alive req/s | keep-alive p50 / p99 (added) | new-conn req/s | new-conn p50 / p99 (added) |\n|---|---|---|---|---|\n")
	dk50, dk99 := benchPercentile(results[1][0], 0.5), benchPercentile(results[1][0], 0.99)
	dn50, dn99 := benchPercentile(results[3][0], 0.5), benchPercentile(results[3][0], 0.99)
	for pi, p := range paths {
		rk, rn := benchSpreadOf(results[0][pi]), benchSpreadOf(results[2][pi])
		k50, k99 := benchPercentile(results[1][pi], 0.5), benchPercentile(results[1][pi], 0.99)
		n50, n99 := benchPercentile(results[3][pi], 0.5), benchPercentile(results[3][pi], 0.99)
		added := func(v, base float64) string {
			if pi == 0 {
				return ""
			}
			return fmt.Sprintf(" (+%.2f)", v-base)
		}
		fmt.Fprintf(&out, "| %s | %.0f (%.0f–%.0f) | %.2f%s / %.2f%s ms | %.0f (%.0f–%.0f) | %.2f%s / %.2f%s ms |\n",
			p.name, rk.med, rk.min, rk.max, k50, added(k50, dk50), k99, added(k99, dk99),
			rn.med, rn.min, rn.max, n50, added(n50, dn50), n99, added(n99, dn99))
	}
	// The targets of issue 18, against Squid's bump where it ran.
	for pi, p := range paths {
		if p.name != "squid bump" {
			continue
		}
		for _, m := range []struct {
			name      string
			rate, lat int
			base      float64
		}{{"keep-alive", 0, 1, dk99}, {"new-conn", 2, 3, dn99}} {
			ratios := benchSpreadOf(benchPairedRatios(results[m.rate][pi], results[m.rate][1]))
			ratio := ratios.med
			dAdded := benchPercentile(results[m.lat][1], 0.99) - m.base
			sAdded := benchPercentile(results[m.lat][pi], 0.99) - m.base
			fmt.Fprintf(&out, "\n%s: doorman/squid bump req/s %.2fx [%.2f..%.2f over the rounds] (%s); added p99 doorman %.2f ms, squid %.2f ms (%s)",
				m.name, ratio, ratios.min, ratios.max, benchVerdict("target >= 2x", ratio >= 2), dAdded, sAdded, benchVerdict("target below squid's", dAdded < sAdded))
		}
	}
	// The inspected relay against the older binary's.
	for pi, p := range paths {
		if p.name != "doorman inspected, baseline" {
			continue
		}
		rk := benchSpreadOf(benchPairedRatios(results[0][pi], results[0][1]))
		rn := benchSpreadOf(benchPairedRatios(results[2][pi], results[2][1]))
		fmt.Fprintf(&out, "\ndoorman inspected / %s: keep-alive req/s %.2fx [%.2f..%.2f], p99 %.2f vs %.2f ms; new-conn req/s %.2fx [%.2f..%.2f], p99 %.2f vs %.2f ms",
			p.name, rk.med, rk.min, rk.max, benchPercentile(results[1][1], 0.99), benchPercentile(results[1][pi], 0.99),
			rn.med, rn.min, rn.max, benchPercentile(results[3][1], 0.99), benchPercentile(results[3][pi], 0.99))
	}
	// Uninspected hosts: the spliced host of a proxy that inspects
	// another, and the older binary, against the proxy with no rules.
	base := slices.IndexFunc(paths, func(p *inspectPath) bool { return p.name == "doorman, no rules" })
	for pi, p := range paths {
		if pi == base || (p.name != "doorman spliced" && !strings.HasPrefix(p.name, "doorman, no rules, ")) {
			continue
		}
		rk := benchSpreadOf(benchPairedRatios(results[0][base], results[0][pi]))
		rn := benchSpreadOf(benchPairedRatios(results[2][base], results[2][pi]))
		fmt.Fprintf(&out, "\n%s / doorman, no rules: keep-alive req/s %.2fx [%.2f..%.2f], p99 %.2f vs %.2f ms; new-conn req/s %.2fx [%.2f..%.2f], p99 %.2f vs %.2f ms",
			p.name, rk.med, rk.min, rk.max, benchPercentile(results[1][pi], 0.99), benchPercentile(results[1][base], 0.99),
			rn.med, rn.min, rn.max, benchPercentile(results[3][pi], 0.99), benchPercentile(results[3][base], 0.99))
	}
	fmt.Println(out.String())
	b.Log("\n" + out.String())
}

func skipUnlessRootB(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root")
	}
}

// inspectBenchClient is an HTTP/1.1 client whose connections are made
// inside p's sandbox.
func inspectBenchClient(p *inspectPath) func(bool) *http.Client {
	// The address, never the name: the test process's resolver is the
	// host's, and the proxies resolve the SNI themselves.
	to := netip.AddrPortFrom(inspectBenchAddr, 443)
	if p.host == inspectBenchPlainName {
		to = netip.AddrPortFrom(inspectBenchPlainAddr, 443)
	}
	dial := func(ctx context.Context, network, _ string) (net.Conn, error) {
		var c net.Conn
		err := p.sb.Do(func() error {
			var err error
			c, err = (&net.Dialer{}).DialContext(ctx, network, to.String())
			return err
		})
		return c, err
	}
	return func(keepAlive bool) *http.Client {
		return &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
			DialContext:         dial,
			TLSClientConfig:     &tls.Config{RootCAs: p.roots, ClientSessionCache: nil},
			DisableKeepAlives:   !keepAlive,
			MaxIdleConnsPerHost: inspectBenchClients,
			TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1
		}}
	}
}

// post sends the benchmark's request once.
func (p *inspectPath) post(c *http.Client, body string) (int, error) {
	return p.postTo(c, "/v1/messages", body)
}

// postTo POSTs body to path.
func (p *inspectPath) postTo(c *http.Client, path, body string) (int, error) {
	resp, err := c.Post("https://"+p.host+path, "application/json", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (p *inspectPath) check() error {
	c := p.client(false)
	code, err := p.post(c, inspectBenchBody)
	if err == nil && code != 200 {
		err = fmt.Errorf("status %d", code)
	}
	return err
}

// checkDenies proves a path's rule is in force: its refused request
// gets 403.
func (p *inspectPath) checkDenies() error {
	if p.denyPath == "" {
		return nil
	}
	code, err := p.postTo(p.client(false), p.denyPath, p.denyBody)
	if err == nil && code != 403 {
		err = fmt.Errorf("POST %s %s got %d, want 403", p.denyPath, p.denyBody, code)
	}
	return err
}

// enforceInspectBench enforces a doorman sandbox of its own, as the CNI
// plugin would, for both bench names and the request rules in rules
// (none if ""), its proxy run from binary.
func enforceInspectBench(b *testing.B, n *testnet.Net, dir, name, rules, caDir, upstreamCA, binary string) *testnet.Sandbox {
	pol, err := conf.ParseFile([]byte(inspectBenchName + "\n" + inspectBenchPlainName + "\n" + rules))
	if err != nil {
		b.Fatal(err)
	}
	sb := n.NewSandbox(b)
	req := sandbox.Request{
		Attachment: sandbox.Attachment{Key: sb.Name(), Runtime: "cni", NetNS: sb.Path(), Label: "full"},
		Spec: spec.Spec{
			Policy:            pol,
			Resolvers:         []netip.Addr{n.DNS},
			LogDir:            filepath.Join(dir, "log-"+name),
			UpstreamResolvers: []netip.AddrPort{netip.AddrPortFrom(n.DNS, 53)},
			Proxy:             spec.Proxy{CADir: caDir, UpstreamCAFile: upstreamCA},
		},
		StateDir: filepath.Join(dir, "state-"+name), ProxyBinary: binary,
	}
	if err := n.InHost(func() error { _, err := sandbox.Enforce(req); return err }); err != nil {
		b.Fatalf("enforce the doorman sandbox %s (proxy %s): %v", name, binary, err)
	}
	b.Cleanup(func() { n.InHost(func() error { return sandbox.Teardown(req.StateDir, req.Key) }) })
	return sb
}

// rate is requests per second with inspectBenchClients clients for
// inspectBenchRateTime.
func (p *inspectPath) rate(keepAlive bool) float64 {
	c := p.client(keepAlive)
	defer c.CloseIdleConnections()
	var done atomic.Int64
	stop := time.Now().Add(inspectBenchRateTime)
	var wg sync.WaitGroup
	start := time.Now()
	for range inspectBenchClients {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if code, err := p.post(c, inspectBenchBody); err == nil && code == 200 {
					done.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return float64(done.Load()) / time.Since(start).Seconds()
}

// latency is n sequential requests' times in milliseconds.
func (p *inspectPath) latency(keepAlive bool, n int) []float64 {
	c := p.client(keepAlive)
	defer c.CloseIdleConnections()
	p.post(c, inspectBenchBody) // the keep-alive connection, made before timing
	out := make([]float64, 0, n)
	for range n {
		t := time.Now()
		if code, err := p.post(c, inspectBenchBody); err == nil && code == 200 {
			out = append(out, float64(time.Since(t).Microseconds())/1000)
		}
	}
	return out
}

// startSquidBump runs Squid 5 as a bumping proxy for a sandbox of its own:
// intercepted TLS is peeked at step 1 and bumped, leaves minted from a
// throwaway CA, the upstream verified against the fake internet's CA, and
// the rule's method and path part as an ACL (Squid cannot read bodies).
// The CONNECT that Squid makes up for each intercepted connection is let
// through, so that its requests are judged once bumped.
func startSquidBump(b *testing.B, n *testnet.Net, upstreamCA string) *inspectPath {
	bin := benchPeerBinary("squid")
	certgen := "/usr/lib/squid/security_file_certgen"
	if bin == "" || !benchIsExecutable(certgen) {
		b.Log("squid (squid-openssl) is not installed: the squid bump path is skipped")
		return nil
	}
	dir, err := os.MkdirTemp("", "dm-bench-squid-bump-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	if err := writeBenchCA(dir); err != nil {
		b.Fatal(err)
	}
	data, _ := os.ReadFile(upstreamCA)
	os.WriteFile(filepath.Join(dir, "upstream.pem"), data, 0o644)
	if out, err := exec.Command(certgen, "-c", "-s", filepath.Join(dir, "ssl_db"), "-M", "16MB").CombinedOutput(); err != nil {
		b.Fatalf("security_file_certgen: %v: %s", err, out)
	}
	cfg := fmt.Sprintf(`http_port 127.0.0.1:%[1]d
https_port %[2]d intercept ssl-bump tls-cert=%[3]s/ca.pem tls-key=%[3]s/ca.key generate-host-certificates=on dynamic_cert_mem_cache_size=16MB
sslcrtd_program %[4]s -s %[3]s/ssl_db -M 16MB
sslcrtd_children 4
acl step1 at_step SslBump1
ssl_bump peek step1
ssl_bump bump all
tls_outgoing_options cafile=%[3]s/upstream.pem
acl inspected dstdomain %[5]s
acl post method POST
acl messages urlpath_regex ^/v1/messages$
acl connect method CONNECT
http_access allow connect
http_access allow inspected post messages
http_access deny all
cache deny all
cache_mem 0 MB
max_filedescriptors %[6]d
pid_filename %[3]s/squid.pid
cache_log %[3]s/cache.log
access_log stdio:%[3]s/access.log
coredump_dir %[3]s
netdb_filename none
pinger_enable off
dns_nameservers %[7]s
visible_hostname doorman-bench
shutdown_lifetime 1 seconds
`, squidForwardPort, squidInterceptPort, dir, certgen, inspectBenchName, 2*benchPeerMaxConn, n.DNS)
	path := filepath.Join(dir, "squid.conf")
	os.WriteFile(path, []byte(cfg), 0o644)
	if err := benchChownTo(dir, "proxy"); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command(bin, "-k", "parse", "-f", path).CombinedOutput(); err != nil {
		b.Fatalf("squid -k parse: %v: %s", err, out)
	}
	sb := n.NewSandbox(b)
	pid := startBenchPeer(b, n.HostNS(), "squid", filepath.Join(dir, "squid.out"), bin, "-N", "-f", path)
	if err := benchWaitListening(n.HostNS(), squidInterceptPort, pid); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "cache.log"))
		b.Fatalf("squid: %v; cache.log:\n%s", err, log)
	}
	roots := x509.NewCertPool()
	pemData, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	roots.AppendCertsFromPEM(pemData)
	// Squid judges the method and the path only.
	return &inspectPath{name: "squid bump", sb: sb, host: inspectBenchName, roots: roots,
		denyPath: "/v1/other", denyBody: inspectBenchBody}
}

// mitmRule is the whole rule as a mitmproxy addon.
const mitmRule = `import json
from mitmproxy import http

def request(flow):
    if flow.request.method != "POST" or flow.request.path.split("?")[0] != "/v1/messages":
        return
    try:
        body = json.loads(flow.request.get_content())
    except Exception:
        flow.response = http.Response.make(403, b"body is not JSON")
        return
    tools = body.get("tools", []) if isinstance(body, dict) else []
    for t in tools if isinstance(tools, list) else []:
        if isinstance(t, dict) and str(t.get("type", "")).startswith("web_search"):
            flow.response = http.Response.make(403, b"denied")
            return
`

// startMitmproxy runs mitmdump in transparent mode for a sandbox of its
// own, with mitmRule, verifying the upstream against the fake internet's
// CA.
func startMitmproxy(b *testing.B, n *testnet.Net, upstreamCA string) *inspectPath {
	bin := benchPeerBinary("mitmdump")
	if bin == "" {
		b.Log("mitmproxy is not installed (apt-get install -y mitmproxy): the mitmproxy path is skipped")
		return nil
	}
	dir := b.TempDir()
	os.WriteFile(filepath.Join(dir, "rule.py"), []byte(mitmRule), 0o644)
	sb := n.NewSandbox(b)
	pid := startBenchPeer(b, n.HostNS(), "mitmdump", filepath.Join(dir, "mitm.log"), bin,
		"--mode", "transparent", "--listen-host", "0.0.0.0", "--listen-port", fmt.Sprint(inspectBenchMitmPort),
		"--set", "confdir="+dir, "--set", "ssl_verify_upstream_trusted_ca="+upstreamCA, "--set", "block_global=false",
		"--set", "connection_strategy=lazy", "-q", "-s", filepath.Join(dir, "rule.py"))
	if err := benchWaitListening(n.HostNS(), inspectBenchMitmPort, pid); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "mitm.log"))
		b.Fatalf("mitmdump: %v\n%s", err, log)
	}
	var pemData []byte
	for range 50 { // the CA is written at start
		if pemData, _ = os.ReadFile(filepath.Join(dir, "mitmproxy-ca-cert.pem")); len(pemData) > 0 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemData) {
		b.Fatalf("mitmproxy wrote no CA in %s", dir)
	}
	return &inspectPath{name: "mitmproxy", sb: sb, host: inspectBenchName, roots: roots,
		denyPath: "/v1/messages", denyBody: inspectBenchToolBody}
}

// applyBenchRedirects installs, in the host namespace, table ip
// dm-bench-inspect: the TCP arriving on each interface of redirects goes
// to its port (a peer's interception of its sandbox, as a router would
// intercept it), and everything else is left untracked, so that the
// other paths pay nothing for the NAT chain (as applySquidRuleset does
// for the relay benchmark).
func applyBenchRedirects(hostNS string, redirects map[string]uint16) error {
	return nftIn(hostNS, func(c *nftables.Conn) error {
		t := c.AddTable(&nftables.Table{Name: inspectBenchTable, Family: nftables.TableFamilyIPv4})
		ifname := func(iface string, key expr.MetaKey) []expr.Any {
			name := make([]byte, unix.IFNAMSIZ)
			copy(name, iface)
			return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: name}}
		}
		for _, raw := range []struct {
			name string
			hook *nftables.ChainHook
			key  expr.MetaKey
		}{{"raw-prerouting", nftables.ChainHookPrerouting, expr.MetaKeyIIFNAME}, {"raw-output", nftables.ChainHookOutput, expr.MetaKeyOIFNAME}} {
			ch := c.AddChain(&nftables.Chain{Name: raw.name, Table: t, Type: nftables.ChainTypeFilter, Hooknum: raw.hook, Priority: nftables.ChainPriorityRaw})
			for iface := range redirects {
				c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: append(ifname(iface, raw.key), &expr.Verdict{Kind: expr.VerdictAccept})})
			}
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: []expr.Any{&expr.Notrack{}}})
		}
		nat := c.AddChain(&nftables.Chain{Name: "nat-prerouting", Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
		for iface, port := range redirects {
			c.AddRule(&nftables.Rule{Table: t, Chain: nat, Exprs: append(ifname(iface, expr.MetaKeyIIFNAME),
				&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
				&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
				&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED})})
		}
		if err := c.Flush(); err != nil {
			return fmt.Errorf("table ip %s: %w", inspectBenchTable, err)
		}
		return nil
	})
}

func removeBenchRedirects(hostNS string) error {
	return nftIn(hostNS, func(c *nftables.Conn) error {
		c.DelTable(&nftables.Table{Name: inspectBenchTable, Family: nftables.TableFamilyIPv4})
		return c.Flush()
	})
}
