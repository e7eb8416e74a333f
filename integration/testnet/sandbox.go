package testnet

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/vishvananda/netlink"
)

// SandboxIface is the name of a sandbox's interface, as in a container.
const SandboxIface = "eth0"

// Sandbox is a namespace playing a container: one veth to host, IPv4 and
// IPv6 addresses of its own, default routes via host. Its embedded Netns
// runs code, programs and connections inside it.
type Sandbox struct {
	*Netns

	// Index is N in the address plan: the sandbox holds 198.51.100.4N+2 and
	// 2001:db8:2:N::2.
	Index int
	// Addr4 and Addr6 are the sandbox's addresses on SandboxIface.
	Addr4, Addr6 netip.Addr
	// Gateway4 and Gateway6 are host's end of the veth, the default gateways.
	Gateway4, Gateway6 netip.Addr
	// Prefix4 and Prefix6 are the veth's subnets.
	Prefix4, Prefix6 netip.Prefix
	// HostIface is the name of host's end of the veth ("dmv" and 8 hex
	// digits), the interface a host-side layer of rules would match.
	HostIface string
}

// NewSandbox makes a sandbox namespace wired to host, deleted by t's
// cleanup. t may be a subtest of the test that made the Net. At most 31
// sandboxes fit in one Net.
func (n *Net) NewSandbox(t testing.TB) *Sandbox {
	t.Helper()
	index := n.takeSandboxIndex()
	if index == 0 {
		t.Fatalf("testnet: NewSandbox: a Net holds at most %d sandboxes at once (198.51.100.4/30 to 198.51.100.124/30)", maxSandboxes)
	}

	base4 := netip.AddrFrom4([4]byte{198, 51, 100, byte(4 * index)})
	base6 := netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, 2, 0, byte(index)})
	s := &Sandbox{
		Index:     index,
		Gateway4:  base4.Next(),
		Addr4:     base4.Next().Next(),
		Gateway6:  base6.Next(),
		Addr6:     base6.Next().Next(),
		Prefix4:   netip.PrefixFrom(base4, 30),
		Prefix6:   netip.PrefixFrom(base6, 64),
		HostIface: "dmv" + randomID(4),
	}
	// Cleanups run last-in first-out: delete host's end of the veth, then
	// the namespace, then free the index. Deleting host's end takes the
	// sandbox's end with it at once, rather than whenever the kernel gets
	// round to freeing the namespace, so the index, its addresses and its
	// namespace name can be handed out again.
	keepIndex := false
	t.Cleanup(func() {
		if !keepIndex {
			n.releaseSandboxIndex(index)
		}
	})
	s.Netns = newNetns(t, n, fmt.Sprintf("sbx%d", index))
	t.Cleanup(func() {
		err := n.host.withLinks(func(h *netlink.Handle) error {
			link, err := h.LinkByName(s.HostIface)
			if err != nil {
				var notFound netlink.LinkNotFoundError
				if errors.As(err, &notFound) {
					return nil // never made, or host already gone
				}
				return err
			}
			return h.LinkDel(link)
		})
		if err != nil {
			t.Errorf("testnet: delete %s in %s: %v", s.HostIface, n.host.Name(), err)
			keepIndex = true // its addresses may still be in use
		}
	})

	err := n.host.withLinks(func(h *netlink.Handle) error {
		veth := &netlink.Veth{
			LinkAttrs:     netlink.LinkAttrs{Name: s.HostIface},
			PeerName:      SandboxIface,
			PeerNamespace: netlink.NsFd(int(s.ns.Fd())),
		}
		if err := h.LinkAdd(veth); err != nil {
			return fmt.Errorf("add veth %s/%s: %w", s.HostIface, SandboxIface, err)
		}
		return configureLink(h, s.HostIface,
			netip.PrefixFrom(s.Gateway4, 30), netip.PrefixFrom(s.Gateway6, 64))
	})
	if err != nil {
		t.Fatalf("testnet: wire sandbox %s in %s: %v", s.Name(), n.host.Name(), err)
	}
	err = s.withLinks(func(h *netlink.Handle) error {
		if err := configureLink(h, SandboxIface,
			netip.PrefixFrom(s.Addr4, 30), netip.PrefixFrom(s.Addr6, 64)); err != nil {
			return err
		}
		return addRoutes(h,
			&netlink.Route{Gw: s.Gateway4.AsSlice()},
			&netlink.Route{Gw: s.Gateway6.AsSlice()},
		)
	})
	if err != nil {
		t.Fatalf("testnet: wire sandbox %s: %v", s.Name(), err)
	}
	if err := s.waitLinkReady(SandboxIface, s.Addr6); err != nil {
		t.Fatalf("testnet: %v", err)
	}
	if err := n.host.waitLinkReady(s.HostIface, s.Gateway6); err != nil {
		t.Fatalf("testnet: %v", err)
	}
	return s
}

// takeSandboxIndex returns the lowest free sandbox index, or 0 if all are
// taken.
func (n *Net) takeSandboxIndex() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := 1; i <= maxSandboxes; i++ {
		if !n.sandboxes[i] {
			n.sandboxes[i] = true
			return i
		}
	}
	return 0
}

func (n *Net) releaseSandboxIndex(i int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sandboxes[i] = false
}
