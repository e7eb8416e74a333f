package hostlayer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/doorman-net/doorman/enforce/nft"
)

// ErrNoHostPeer says that a sandbox has no veth whose peer is in the
// runtime's namespace (yet): its interfaces are macvlan or ipvlan, or the
// runtime has not created them.
var ErrNoHostPeer = errors.New("no veth of the sandbox has its peer in the runtime's namespace")

// FindHostPeers returns the names, sorted, of the interfaces in the
// runtime's namespace (runtimeNetNS) that are the peers of the sandbox's
// veths (in sandboxNetNS): the HostIfaces of a Spec, for the hook path,
// which has no CNI result to read them from. A pair counts only if each end
// names the other (IFLA_LINK) and the other's namespace. It returns an
// error matching ErrNoHostPeer if there is none.
func FindHostPeers(sandboxNetNS, runtimeNetNS string) ([]string, error) {
	names, err := findHostPeers(sandboxNetNS, runtimeNetNS)
	if err != nil {
		return nil, fmt.Errorf("hostlayer: find the host side of %s in %s: %w", sandboxNetNS, runtimeNetNS, err)
	}
	return names, nil
}

func findHostPeers(sandboxNetNS, runtimeNetNS string) ([]string, error) {
	sf, err := nft.OpenNetNSFile(sandboxNetNS)
	if err != nil {
		return nil, err
	}
	defer sf.Close()
	rf, err := nft.OpenNetNSFile(runtimeNetNS)
	if err != nil {
		return nil, err
	}
	defer rf.Close()
	sh, err := newRouteHandle(sf)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %s: %w", sandboxNetNS, err)
	}
	defer sh.Close()
	rh, err := newRouteHandle(rf)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %s: %w", runtimeNetNS, err)
	}
	defer rh.Close()

	links, err := sh.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links of %s: %w", sandboxNetNS, err)
	}
	// Namespace ids are relative: the id the sandbox has for the runtime's
	// namespace, and the one the runtime has for the sandbox's. Listing the
	// links (which report the peer's namespace id) has assigned them.
	runtimeID, err := sh.GetNetNsIdByFd(int(rf.Fd()))
	if err != nil {
		return nil, fmt.Errorf("namespace id of %s in %s: %w", runtimeNetNS, sandboxNetNS, err)
	}
	sandboxID, err := rh.GetNetNsIdByFd(int(sf.Fd()))
	if err != nil {
		return nil, fmt.Errorf("namespace id of %s in %s: %w", sandboxNetNS, runtimeNetNS, err)
	}
	if runtimeID < 0 || sandboxID < 0 {
		return nil, ErrNoHostPeer // no link between the two namespaces
	}

	var names []string
	for _, l := range links {
		a := l.Attrs()
		if l.Type() != "veth" || a.NetNsID != runtimeID || a.ParentIndex == 0 {
			continue
		}
		peer, err := rh.LinkByIndex(a.ParentIndex)
		if linkNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("look up index %d in %s: %w", a.ParentIndex, runtimeNetNS, err)
		}
		pa := peer.Attrs()
		if peer.Type() != "veth" || pa.ParentIndex != a.Index || pa.NetNsID != sandboxID {
			continue
		}
		names = append(names, pa.Name)
	}
	if len(names) == 0 {
		return nil, ErrNoHostPeer
	}
	slices.Sort(names)
	return names, nil
}

// WaitHostPeers is FindHostPeers for a sandbox whose interfaces the runtime
// may not have created yet (Docker >= 28 adds them after the createRuntime
// hook): it returns as soon as the sandbox has at least one veth with its
// peer in the runtime's namespace, watching the sandbox's links over
// netlink meanwhile, or fails when ctx is done. A runtime that adds several
// networks one after the other may add more interfaces later.
func WaitHostPeers(ctx context.Context, sandboxNetNS, runtimeNetNS string) ([]string, error) {
	names, err := waitHostPeers(ctx, sandboxNetNS, runtimeNetNS)
	if err != nil {
		return nil, fmt.Errorf("hostlayer: wait for the host side of %s in %s: %w", sandboxNetNS, runtimeNetNS, err)
	}
	return names, nil
}

func waitHostPeers(ctx context.Context, sandboxNetNS, runtimeNetNS string) ([]string, error) {
	sf, err := nft.OpenNetNSFile(sandboxNetNS)
	if err != nil {
		return nil, err
	}
	defer sf.Close()
	updates := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer func() {
		close(done)
		go func() {
			for range updates { // until the subscription closes it
			}
		}()
	}()
	h := netns.NsHandle(int(sf.Fd()))
	if err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{Namespace: &h}); err != nil {
		return nil, fmt.Errorf("watch the links of %s: %w", sandboxNetNS, err)
	}
	// Subscribed first, looked second: a link added in between is seen.
	for {
		names, err := findHostPeers(sandboxNetNS, runtimeNetNS)
		if !errors.Is(err, ErrNoHostPeer) {
			return names, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w (%w)", ErrNoHostPeer, ctx.Err())
		case _, ok := <-updates:
			if !ok {
				return nil, fmt.Errorf("watch the links of %s: subscription ended", sandboxNetNS)
			}
		}
	}
}
