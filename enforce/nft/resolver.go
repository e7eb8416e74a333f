package nft

import (
	"errors"
	"fmt"
	"net/netip"
)

// CheckResolver returns an error saying why a cannot be a DNS server that
// a rule matches by its address (`ip daddr A udp dport 53`), or nil.
func CheckResolver(a netip.Addr) error {
	switch {
	case !a.IsValid():
		return errors.New("not an IP address")
	case a.Zone() != "":
		return fmt.Errorf("scoped address: nftables cannot match an IPv6 zone, give the address without %%%s", a.Zone())
	case a.IsUnspecified():
		return errors.New("unspecified address cannot be a DNS server")
	case a.IsMulticast():
		return errors.New("multicast address cannot be a DNS server")
	}
	return nil
}
