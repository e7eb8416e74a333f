package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/miekg/dns"

	"github.com/doorman-net/doorman/integration/testnet"
)

// floodBed is the world of the flood tests and benchmark: the fake
// internet with one host (apiName, whose recorder port never answers, so
// a connection relayed to it stays open), and sandboxes attached through
// libcni to one bridge network in the host namespace, each with the caps
// it is given, as CNI runtimes attach containers.
type floodBed struct {
	tb                        testing.TB
	net                       *testnet.Net
	api                       *testnet.Host
	stateDir, logDir, ipamDir string
	cni                       *libcni.CNIConfig
	sandboxes                 int
	hello                     []byte // a Go client's ClientHello for apiName
}

// newFloodBed makes the world. portRange, if not "", is the host
// namespace's ephemeral port range ("lo hi"), set before any proxy starts
// (each reads it at start).
func newFloodBed(tb testing.TB, portRange string) *floodBed {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root")
	}
	n := testnet.New(tb)
	dir := tb.TempDir()
	b := &floodBed{
		tb: tb, net: n, api: n.AddHost(apiName, apiAddr4),
		stateDir: filepath.Join(dir, "state"), logDir: filepath.Join(dir, "log"), ipamDir: filepath.Join(dir, "ipam"),
		cni: libcni.NewCNIConfig([]string{binDir}, nil),
	}
	if portRange != "" {
		if err := n.InHost(func() error {
			return os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte(portRange), 0o644)
		}); err != nil {
			tb.Fatalf("port range: %v", err)
		}
	}
	hello, err := benchClientHello(apiName)
	if err != nil {
		tb.Fatal(err)
	}
	b.hello = hello
	return b
}

// limitNoFile makes the sandboxes attached from now on run their plugin,
// and so their proxy, with a descriptor limit of n (soft and hard), as a
// host with a low limit would: the plugin is found in a directory of its
// own where "doorman" is prlimit running the real one.
func (b *floodBed) limitNoFile(n int) {
	b.tb.Helper()
	dir := b.tb.TempDir()
	script := fmt.Sprintf("#!/bin/sh\nexec prlimit --nofile=%d:%d -- %s \"$@\"\n", n, n, doormanBin())
	if err := os.WriteFile(filepath.Join(dir, "doorman"), []byte(script), 0o755); err != nil {
		b.tb.Fatal(err)
	}
	for _, p := range []string{"bridge", "host-local"} {
		if err := os.Symlink(filepath.Join(binDir, p), filepath.Join(dir, p)); err != nil {
			b.tb.Fatal(err)
		}
	}
	b.cni = libcni.NewCNIConfig([]string{dir}, nil)
}

// floodSandbox is one container of the bed.
type floodSandbox struct {
	b       *floodBed
	ns      *testnet.Netns
	rt      *libcni.RuntimeConf
	list    *libcni.NetworkConfigList
	logFile string
}

// sandbox attaches a new container with the network's limits (nil: none
// given, the defaults), allowing apiName only; DEL is a cleanup.
func (b *floodBed) sandbox(limits map[string]any) *floodSandbox {
	b.tb.Helper()
	return b.sandboxAllowing(limits, apiName)
}

// sandboxAllowing is sandbox with the allowlist hosts.
func (b *floodBed) sandboxAllowing(limits map[string]any, hosts ...string) *floodSandbox {
	b.tb.Helper()
	b.sandboxes++
	ns := b.net.NewNetns(b.tb, fmt.Sprintf("fl%d", b.sandboxes))
	id := fmt.Sprintf("fl%d%s", b.sandboxes, strings.ReplaceAll(filepath.Base(ns.Name()), "-", ""))
	doorman := map[string]any{
		"type": "doorman", "mode": "allowlist", "allowedHosts": hosts,
		"stateDir": b.stateDir, "logDir": b.logDir, "upstreamResolver": b.net.DNS.String(),
	}
	if limits != nil {
		doorman["limits"] = limits
	}
	data, _ := json.Marshal(map[string]any{
		"cniVersion": "1.1.0", "name": "dmflood",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "dmfl0", "isGateway": true, "ipMasq": false,
				"ipam": map[string]any{
					"type": "host-local", "dataDir": b.ipamDir,
					"ranges": []any{[]any{map[string]any{"subnet": "198.51.100.128/26", "gateway": "198.51.100.129"}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
				"dns": map[string]any{"nameservers": []string{b.net.DNS.String()}},
			},
			doorman,
		},
	})
	list, err := libcni.ConfListFromBytes(data)
	if err != nil {
		b.tb.Fatalf("conflist: %v", err)
	}
	s := &floodSandbox{b: b, ns: ns, list: list, rt: &libcni.RuntimeConf{ContainerID: id, NetNS: ns.Path(), IfName: "eth0"},
		logFile: filepath.Join(b.logDir, id+"-eth0.log")}
	if err := b.net.InHost(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := b.cni.AddNetworkList(ctx, list, s.rt)
		return err
	}); err != nil {
		b.tb.Fatalf("ADD: %v", err)
	}
	b.tb.Cleanup(func() {
		b.net.InHost(func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			return b.cni.DelNetworkList(ctx, list, s.rt)
		})
	})
	return s
}

// lines returns the sandbox's log lines.
func (s *floodSandbox) lines() []map[string]any {
	data, _ := os.ReadFile(s.logFile)
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// limitLines returns the sandbox's limit lines of the cap limit.
func (s *floodSandbox) limitLines(limit string) []map[string]any {
	var out []map[string]any
	for _, m := range s.lines() {
		if m["msg"] == "limit" && m["limit"] == limit {
			out = append(out, m)
		}
	}
	return out
}

// waitLine waits for a line whose msg is msg.
func (s *floodSandbox) waitLine(msg string) map[string]any {
	s.b.tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, m := range s.lines() {
			if m["msg"] == msg {
				return m
			}
		}
	}
	data, _ := os.ReadFile(s.logFile)
	s.b.tb.Fatalf("no %s line in %s:\n%s", msg, s.logFile, data)
	return nil
}

// waitLimitLine waits for a limit line of the cap limit.
func (s *floodSandbox) waitLimitLine(limit string) map[string]any {
	s.b.tb.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if l := s.limitLines(limit); len(l) > 0 {
			return l[0]
		}
	}
	data, _ := os.ReadFile(s.logFile)
	s.b.tb.Fatalf("no limit line for %s in %s:\n%s", limit, s.logFile, data)
	return nil
}

// hold opens n connections to apiName's recorder, each sending a whole
// ClientHello: the proxy relays them (the recorder never answers) until
// a cap refuses.
func (s *floodSandbox) hold(n int) []*net.TCPConn { return s.holdAt(testnet.PortRecorder, n) }

// holdAt is hold to another of apiName's recorder ports.
func (s *floodSandbox) holdAt(port uint16, n int) []*net.TCPConn {
	s.b.tb.Helper()
	conns := make([]*net.TCPConn, 0, n)
	for i := range n {
		c, err := s.ns.DialTCP(netip.AddrPortFrom(apiAddr4, port).String())
		if errors.Is(err, syscall.ECONNRESET) {
			continue // reset at once: more refusals at a time than the proxy answers
		}
		if err != nil {
			s.b.tb.Fatalf("connection %d: %v", i, err)
		}
		c.Write(s.b.hello)
		conns = append(conns, c)
	}
	s.b.tb.Cleanup(func() { closeAll(conns) })
	return conns
}

func closeAll(conns []*net.TCPConn) {
	for _, c := range conns {
		c.Close()
	}
}

// The outcomes of a connection held open, as its client sees them.
const (
	outcomeOpen   = "open"   // nothing came back: relayed to the recorder
	outcomeAlert  = "alert"  // a TLS internal_error alert: refused by a cap
	outcomeClosed = "closed" // closed or reset without an alert
)

// outcomes reads each connection until wait passes, all at once, and
// counts what they got.
func outcomes(conns []*net.TCPConn, wait time.Duration) map[string]int {
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(func() {
			c.SetReadDeadline(time.Now().Add(wait))
			b, err := io.ReadAll(c)
			o := outcomeClosed
			switch {
			case len(b) >= 7 && b[0] == 0x15 && b[6] == 80:
				o = outcomeAlert
			case len(b) == 0 && errors.Is(err, os.ErrDeadlineExceeded):
				o = outcomeOpen
			}
			mu.Lock()
			got[o]++
			mu.Unlock()
		})
	}
	wg.Wait()
	return got
}

// waitRecorded waits until apiName's recorder has seen n connections.
func (b *floodBed) waitRecorded(n int) int {
	deadline := time.Now().Add(10 * time.Second)
	for b.api.Connections(testnet.PortRecorder) < n && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	return b.api.Connections(testnet.PortRecorder)
}

// get is one HTTPS request from the sandbox to apiName on a connection of
// its own; it returns how long it took.
func (s *floodSandbox) get(client *http.Client) (time.Duration, error) {
	start := time.Now()
	resp, err := client.Get("https://" + apiName + "/")
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(string(body), apiName+" ") {
		return 0, fmt.Errorf("status %d, body %q", resp.StatusCode, body)
	}
	return time.Since(start), nil
}

// client is an HTTP client of the sandbox that opens a connection per
// request, as a new client would.
func (s *floodSandbox) client() *http.Client {
	c := s.ns.HTTPClient()
	c.Transport.(*http.Transport).DisableKeepAlives = true
	return c
}

// trickle opens n connections to apiName's recorder and sends each a
// ClientHello in 1-byte records, a round of one record per connection
// every gap, until the hellos are sent or stop is closed. It returns the
// connections once done, and how many of the n were reset before the
// dial returned (refused as soon as they were accepted).
func (s *floodSandbox) trickle(n int, gap time.Duration, stop <-chan struct{}) ([]*net.TCPConn, int) {
	s.b.tb.Helper()
	conns := make([]*net.TCPConn, 0, n)
	reset := 0
	for i := range n {
		c, err := s.ns.DialTCP(netip.AddrPortFrom(apiAddr4, testnet.PortRecorder).String())
		if errors.Is(err, syscall.ECONNRESET) {
			reset++
			continue
		}
		if err != nil {
			s.b.tb.Fatalf("connection %d: %v", i, err)
		}
		c.SetNoDelay(true)
		conns = append(conns, c)
	}
	s.b.tb.Cleanup(func() { closeAll(conns) })
	records := oneByteRecords(s.b.hello)
	dead := make([]bool, len(conns))
	for _, r := range records {
		select {
		case <-stop:
			return conns, reset
		default:
		}
		for i, c := range conns {
			if !dead[i] {
				c.SetWriteDeadline(time.Now().Add(time.Second))
				if _, err := c.Write(r); err != nil {
					dead[i] = true
				}
			}
		}
		time.Sleep(gap)
	}
	return conns, reset
}

// oneByteRecords splits a ClientHello record into records of one byte of
// handshake data each.
func oneByteRecords(hello []byte) [][]byte {
	body := hello[5:]
	out := make([][]byte, len(body))
	for i, b := range body {
		out[i] = []byte{22, 3, 1, 0, 1, b}
	}
	return out
}

// dnsFlood sends n queries for name over UDP to the sandbox's resolver
// (the DNS filter answers them), as fast as it can, and counts the
// answers by rcode; those REFUSED with doorman's "over its limit"
// Extended DNS Error are counted as "limited". It returns once no answer
// came for quiet.
func (s *floodSandbox) dnsFlood(n int, name string, quiet time.Duration) map[string]int {
	s.b.tb.Helper()
	c, err := s.ns.DialUDP(netip.AddrPortFrom(s.b.net.DNS, 53).String())
	if err != nil {
		s.b.tb.Fatal(err)
	}
	defer c.Close()
	got := map[string]int{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			c.SetReadDeadline(time.Now().Add(quiet))
			k, err := c.Read(buf)
			if err != nil {
				return
			}
			m := new(dns.Msg)
			if m.Unpack(buf[:k]) != nil {
				got["malformed"]++
				continue
			}
			key := dns.RcodeToString[m.Rcode]
			if opt := m.IsEdns0(); opt != nil {
				for _, o := range opt.Option {
					if ede, ok := o.(*dns.EDNS0_EDE); ok && strings.Contains(ede.ExtraText, "over its limit") {
						key = "limited"
					}
				}
			}
			got[key]++
		}
	}()
	for i := range n {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(name), dns.TypeA)
		m.Id = uint16(i)
		m.SetEdns0(1232, false)
		out, _ := m.Pack()
		c.Write(out)
		if i%16 == 15 {
			time.Sleep(time.Millisecond) // let the socket buffers drain
		}
	}
	<-done
	return got
}
