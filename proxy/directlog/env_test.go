package directlog

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// pair is two network namespaces joined by a veth: the sandbox
// (198.51.100.1/24) and its peer (198.51.100.2/24 and .3/24).
type pair struct {
	sandbox, peer string // paths under /var/run/netns
}

const (
	sandboxAddr = "198.51.100.1"
	peerAddr    = "198.51.100.2"
	peerAddr2   = "198.51.100.3"
)

func newPair(t *testing.T) pair {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	var b [4]byte
	rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	sb, peer := "dm-directlog-"+id+"-s", "dm-directlog-"+id+"-p"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	for _, n := range []string{sb, peer} {
		ip("netns", "add", n)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", n).Run() })
	}
	// Created inside the namespaces: the root namespace never sees them.
	ip("-n", sb, "link", "add", "veth0", "type", "veth", "peer", "name", "veth0", "netns", peer)
	ip("-n", sb, "addr", "add", sandboxAddr+"/24", "dev", "veth0")
	ip("-n", peer, "addr", "add", peerAddr+"/24", "dev", "veth0")
	ip("-n", peer, "addr", "add", peerAddr2+"/24", "dev", "veth0")
	for _, n := range []string{sb, peer} {
		ip("-n", n, "link", "set", "lo", "up")
		ip("-n", n, "link", "set", "veth0", "up")
	}
	return pair{sandbox: filepath.Join("/var/run/netns", sb), peer: filepath.Join("/var/run/netns", peer)}
}

// in runs f inside the namespace at path; sockets made there stay there.
func in(t *testing.T, path string, f func() error) {
	t.Helper()
	if err := ns.WithNetNSPath(path, func(ns.NetNS) error { return f() }); err != nil {
		t.Fatal(err)
	}
}

// redirectTCP installs, in the namespace at path, `tcp dport port
// redirect to :to` in a nat output chain: what the sandbox's ruleset does
// to send connections to the proxy. The nat chain also makes conntrack
// track the namespace's flows.
func redirectTCP(t *testing.T, path string, port, to uint16) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	table := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "dm_directlog_test"})
	chain := c.AddChain(&nftables.Chain{
		Name: "output", Table: table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityNATDest,
	})
	c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(to)},
		&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
	}})
	if err := c.Flush(); err != nil {
		t.Fatalf("nftables: %v", err)
	}
}

// serveTCP accepts and closes connections until the test ends.
func serveTCP(t *testing.T, ln net.Listener) {
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
}

// lines is a concurrency-safe log sink that parses JSON lines.
type lines struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lines) all(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, s := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if s == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatalf("log line %q: %v", s, err)
		}
		out = append(out, m)
	}
	return out
}

// waitFor polls until some line satisfies ok.
func (l *lines) waitFor(t *testing.T, what string, ok func(map[string]any) bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range l.all(t) {
			if ok(m) {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no line for %s; log:\n%s", what, l.String())
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func port(a net.Addr) uint16 {
	switch a := a.(type) {
	case *net.TCPAddr:
		return uint16(a.Port)
	case *net.UDPAddr:
		return uint16(a.Port)
	}
	panic(fmt.Sprintf("no port in %v", a))
}
