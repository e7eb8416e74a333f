package testnet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// netnsRunDir is where `ip netns add` bind-mounts named namespaces.
const netnsRunDir = "/var/run/netns"

// netnsEtcDir holds per-namespace files that `ip netns exec` mounts over /etc.
const netnsEtcDir = "/etc/netns"

// Netns is a named network namespace made by this package: the inet, the
// host or a sandbox. Its methods run code, programs and connections inside it.
type Netns struct {
	name string
	ns   ns.NetNS
	net  *Net // resolver and CA for Dial, LookupHost and HTTPClient

	mu         sync.Mutex
	transports []*http.Transport
}

// newNetns creates the named namespace "dm-<role>-<id>" and registers its
// deletion with t.Cleanup.
func newNetns(t testing.TB, n *Net, role string) *Netns {
	t.Helper()
	name := "dm-" + role + "-" + n.id
	if out, err := exec.Command(ipBinary(), "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("testnet: ip netns add %s: %v: %s", name, err, strings.TrimSpace(string(out)))
	}
	x := &Netns{name: name, net: n}
	t.Cleanup(func() {
		if err := x.delete(); err != nil {
			t.Errorf("testnet: %v", err)
		}
	})
	handle, err := ns.GetNS(filepath.Join(netnsRunDir, name))
	if err != nil {
		t.Fatalf("testnet: open namespace %s: %v", name, err)
	}
	x.ns = handle
	if err := x.writeResolvConf(); err != nil {
		t.Fatalf("testnet: %v", err)
	}
	// No duplicate address detection: in a namespace of our own there is
	// nobody to collide with, and tentative link-local addresses would
	// stall IPv6 neighbour discovery for the first second or two.
	if err := x.setSysctls(map[string]string{
		"net/ipv6/conf/all/accept_dad":     "0",
		"net/ipv6/conf/default/accept_dad": "0",
	}); err != nil {
		t.Fatalf("testnet: %v", err)
	}
	if err := x.withLinks(func(h *netlink.Handle) error {
		lo, err := h.LinkByName("lo")
		if err != nil {
			return err
		}
		return h.LinkSetUp(lo)
	}); err != nil {
		t.Fatalf("testnet: set lo up in %s: %v", name, err)
	}
	return x
}

// setSysctls writes /proc/sys/<key> = value inside the namespace
// (/proc/sys/net shows the namespace of the thread that opens it).
func (x *Netns) setSysctls(values map[string]string) error {
	return x.Do(func() error {
		for key, value := range values {
			path := filepath.Join("/proc/sys", key)
			if err := os.WriteFile(path, []byte(value), 0o644); err != nil {
				return fmt.Errorf("set %s=%s in %s: %w", path, value, x.name, err)
			}
		}
		return nil
	})
}

// writeResolvConf points programs run by Command at the Net's resolver.
func (x *Netns) writeResolvConf() error {
	dir := filepath.Join(netnsEtcDir, x.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s for the namespace's resolv.conf: %w", dir, err)
	}
	conf := fmt.Sprintf("nameserver %s\nnameserver %s\noptions timeout:1 attempts:2\n", x.net.DNS, x.net.DNS6)
	path := filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// delete closes idle client connections (they hold the namespace alive),
// then removes the namespace's name and its /etc/netns directory.
func (x *Netns) delete() error {
	x.mu.Lock()
	for _, tr := range x.transports {
		tr.CloseIdleConnections()
	}
	x.transports = nil
	x.mu.Unlock()

	var errs []error
	if x.ns != nil {
		if err := x.ns.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close namespace %s: %w", x.name, err))
		}
	}
	if out, err := exec.Command(ipBinary(), "netns", "del", x.name).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", x.name, err, strings.TrimSpace(string(out))))
	}
	if err := os.RemoveAll(filepath.Join(netnsEtcDir, x.name)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Name is the namespace's name, as `ip netns list` shows it.
func (x *Netns) Name() string { return x.name }

// Path is the namespace's bind mount, e.g. /var/run/netns/dm-host-1a2b3c4d,
// as a CNI runtime passes it in CNI_NETNS.
func (x *Netns) Path() string { return filepath.Join(netnsRunDir, x.name) }

// Do runs fn on an OS thread switched into the namespace. Sockets created
// inside fn stay in the namespace after Do returns; goroutines started by fn
// do not run in it.
func (x *Netns) Do(fn func() error) error {
	return x.ns.Do(func(ns.NetNS) error { return fn() })
}

// Command returns a command that runs the program name inside the namespace
// (through `ip netns exec`), with Net.DNS as its resolver and without the
// caller's proxy environment variables.
func (x *Netns) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, ipBinary(), append([]string{"netns", "exec", x.name, name}, args...)...)
	cmd.Env = environWithoutProxy()
	return cmd
}

// withLinks runs fn with a netlink handle bound to the namespace.
func (x *Netns) withLinks(fn func(*netlink.Handle) error) error {
	h, err := netlink.NewHandleAt(netns.NsHandle(x.ns.Fd()))
	if err != nil {
		return fmt.Errorf("netlink handle in %s: %w", x.name, err)
	}
	defer h.Close()
	return fn(h)
}

// ipBinary finds iproute2's ip, which may live outside a test's PATH.
func ipBinary() string {
	if p, err := exec.LookPath("ip"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "ip"
}

// environWithoutProxy is the process environment minus *_proxy variables,
// which would send curl and friends to a proxy the fake internet lacks.
func environWithoutProxy() []string {
	var env []string
	for _, kv := range os.Environ() {
		key, _, _ := strings.Cut(kv, "=")
		if strings.HasSuffix(strings.ToLower(key), "_proxy") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// randomID returns n random bytes in hex, for names that parallel runs
// must not share.
func randomID(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("testnet: crypto/rand failed: %v", err))
	}
	return hex.EncodeToString(b)
}

// NewNetns makes an empty namespace (only lo, up), named "dm-<role>-<id>",
// for a CNI plugin or a runtime to wire: a container whose interface the
// bridge plugin adds, say. role must be unique within the Net. Commands run
// in it resolve through Net.DNS; it is deleted by t.Cleanup.
func (n *Net) NewNetns(t testing.TB, role string) *Netns {
	t.Helper()
	return newNetns(t, n, role)
}

// OpenNetns opens a network namespace that someone else made and owns (a
// container's, by its /proc/PID/ns/net), so that a test can run code and
// servers in it (Do, ServeHost, RecordICMP). The handle is closed at t's
// cleanup; the namespace is never deleted. Commands run through Command
// need a namespace made by this package.
func OpenNetns(t testing.TB, path string) *Netns {
	t.Helper()
	handle, err := ns.GetNS(path)
	if err != nil {
		t.Fatalf("testnet: open namespace %s: %v", path, err)
	}
	t.Cleanup(func() { handle.Close() })
	return &Netns{name: path, ns: handle}
}

// Links runs fn with a netlink handle bound to the namespace.
func (x *Netns) Links(fn func(*netlink.Handle) error) error { return x.withLinks(fn) }
