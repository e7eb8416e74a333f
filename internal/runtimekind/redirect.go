package runtimekind

import (
	"net"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Redirected reports whether an interface of the network namespace at
// nsPath has an ingress tc filter that redirects its frames to another
// interface (tc mirred egress redirect), as Kata Containers' tcfilter
// mode and the tc-redirect-tap CNI plugin set up between a VM's tap and
// the container's veth: frames that pass no IP hook of the namespace.
// A namespace it cannot read counts as not redirected.
func Redirected(nsPath string) bool {
	h, err := netns.GetFromPath(nsPath)
	if err != nil {
		return false
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return false
	}
	defer nl.Close()
	links, err := nl.LinkList()
	if err != nil {
		return false
	}
	for _, l := range links {
		filters, err := nl.FilterList(l, netlink.HANDLE_MIN_INGRESS)
		if err != nil {
			continue
		}
		for _, f := range filters {
			if redirects(f) {
				return true
			}
		}
	}
	return false
}

// redirects reports whether filter f has a mirred redirect action.
func redirects(f netlink.Filter) bool {
	var actions []netlink.Action
	switch f := f.(type) {
	case *netlink.U32:
		actions = f.Actions
	case *netlink.MatchAll:
		actions = f.Actions
	case *netlink.Flower:
		actions = f.Actions
	case *netlink.BpfFilter:
		return false
	case *netlink.GenericFilter:
		return false
	}
	for _, a := range actions {
		if m, ok := a.(*netlink.MirredAction); ok && (m.MirredAction == netlink.TCA_EGRESS_REDIR || m.MirredAction == netlink.TCA_INGRESS_REDIR) {
			return true
		}
	}
	return false
}

// HasLink reports whether the network namespace at nsPath has an
// interface other than loopback: a way out that something must hold. A
// namespace it cannot read counts as having one.
func HasLink(nsPath string) bool {
	h, err := netns.GetFromPath(nsPath)
	if err != nil {
		return true
	}
	defer h.Close()
	nl, err := netlink.NewHandleAt(h)
	if err != nil {
		return true
	}
	defer nl.Close()
	links, err := nl.LinkList()
	if err != nil {
		return true
	}
	for _, l := range links {
		if l.Attrs().Flags&net.FlagLoopback == 0 {
			return true
		}
	}
	return false
}
