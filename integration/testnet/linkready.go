package testnet

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
)

// linkReadyTimeout bounds the wait for the kernel's asynchronous link set-up.
const linkReadyTimeout = 5 * time.Second

// waitLinkReady waits until the kernel has finished, in the background,
// bringing the named link up: its operational state is up (the "linkwatch"
// work, until which the link drops what it is given) and it has joined the
// solicited-node multicast group of each of the IPv6 addresses v6 (until
// then it ignores neighbour solicitations for them). Without this wait the
// first ARP request or neighbour solicitation of a test can be lost, and its
// first connection stalls for a second until the kernel asks again.
func (x *Netns) waitLinkReady(name string, v6 ...netip.Addr) error {
	deadline := time.Now().Add(linkReadyTimeout)
	err := x.withLinks(func(h *netlink.Handle) error {
		for {
			link, err := h.LinkByName(name)
			if err != nil {
				return fmt.Errorf("find link %s: %w", name, err)
			}
			state := link.Attrs().OperState
			if state == netlink.OperUp {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("link %s still %s after %v, want up", name, state, linkReadyTimeout)
			}
			time.Sleep(time.Millisecond)
		}
	})
	if err != nil {
		return fmt.Errorf("wait for %s in %s: %w", name, x.name, err)
	}
	want := map[string]bool{}
	for _, a := range v6 {
		want[solicitedNode(a)] = true
	}
	for {
		joined, err := x.multicastGroups(name)
		if err != nil {
			return fmt.Errorf("wait for %s in %s: %w", name, x.name, err)
		}
		missing := 0
		for g := range want {
			if !joined[g] {
				missing++
			}
		}
		if missing == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("wait for %s in %s: %d solicited-node groups of %v not joined after %v", name, x.name, missing, v6, linkReadyTimeout)
		}
		time.Sleep(time.Millisecond)
	}
}

// solicitedNode returns the solicited-node multicast group of an IPv6
// address (ff02::1:ff00:0/104 plus its last 24 bits) as /proc/net/igmp6
// writes it: 32 hex digits.
func solicitedNode(a netip.Addr) string {
	b := a.As16()
	g := [16]byte{0: 0xff, 1: 0x02, 11: 0x01, 12: 0xff, 13: b[13], 14: b[14], 15: b[15]}
	return hex.EncodeToString(g[:])
}

// multicastGroups lists the IPv6 multicast groups the link has joined, from
// /proc/thread-self/net/igmp6 read inside the namespace.
func (x *Netns) multicastGroups(link string) (map[string]bool, error) {
	var data []byte
	err := x.Do(func() error {
		var err error
		data, err = os.ReadFile("/proc/thread-self/net/igmp6")
		return err
	})
	if err != nil {
		return nil, err
	}
	groups := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		// "3    dmv1a2b3c4d     ff0200000000000000000001ff000001     1 00000004 0"
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && f[1] == link {
			groups[f[2]] = true
		}
	}
	return groups, sc.Err()
}
