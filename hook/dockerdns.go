package hook

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/doorman-net/doorman/hostconf"
)

// annotationDockerDNS carries, from the runtime wrapper to the hook, the DNS
// servers a Docker container was given (docker run --dns): comma-separated
// addresses.
const annotationDockerDNS = "doorman.io/docker-dns"

// dockerDNS reads the DNS servers of container id from dockerd's own record
// of it (hostconfig.json under the data root). ok is false when there is no
// such record (not a Docker container, or another data root); dns is ""
// when the container has no servers of its own (it then uses the daemon's).
func dockerDNS(root, id string) (dns string, ok bool) {
	if filepath.Base(id) != id {
		return "", false
	}
	data, err := os.ReadFile(filepath.Join(root, "containers", id, "hostconfig.json"))
	if err != nil {
		return "", false
	}
	var hc struct {
		DNS []string `json:"Dns"`
	}
	if json.Unmarshal(data, &hc) != nil {
		return "", false
	}
	return strings.Join(hc.DNS, ","), true
}

// embeddedDNSUpstreams returns the servers Docker's embedded resolver
// (127.0.0.11) forwards a container's queries to. It sends them from inside
// the container's network namespace, so the sandbox must allow them. They
// are the container's own --dns servers, which the wrapper passes in
// annotationDockerDNS; without any, Docker uses the daemon's resolv.conf,
// which is the runtime's own /etc/resolv.conf. (A daemon-wide "dns" in
// daemon.json is not visible here: such containers' external lookups fail,
// closed.)
func embeddedDNSUpstreams(annotations map[string]string) []netip.Addr {
	var out []netip.Addr
	for _, s := range strings.Split(annotations[annotationDockerDNS], ",") {
		if a, err := netip.ParseAddr(strings.TrimSpace(s)); err == nil && a.Zone() == "" {
			out = append(out, a.Unmap())
		}
	}
	if len(out) > 0 {
		return out
	}
	host, _ := os.ReadFile(hostconf.ResolvConf)
	return hostconf.ParseResolvConf(host)
}

// dockerProxyResolvers returns the servers the proxy of a Docker container
// resolves allowed names with, from dockerd's own record of the container
// (which the runtime wrapper passes in annotationDockerDNS): its --dns
// servers, else the daemon's resolv.conf, which is what Docker gives a
// container without servers of its own (directly on the default bridge,
// through 127.0.0.11 on user-defined networks). It returns nil for a
// container the wrapper found no record of; the proxy then asks the
// resolvers of the container's resolv.conf.
//
// The container's resolv.conf is not used for a Docker container: it is
// writable by the workload, and dockerd keeps a container's own edits to it
// across restarts, so a root workload could otherwise name, for the
// container's next start, the server the proxy asks for the addresses of
// allowed names, and have them resolve to a host of its choosing.
// dockerd's record is not the workload's to change.
func dockerProxyResolvers(annotations map[string]string) []netip.AddrPort {
	if _, ok := annotations[annotationDockerDNS]; !ok {
		return nil
	}
	var out []netip.AddrPort
	for _, a := range embeddedDNSUpstreams(annotations) {
		ap := netip.AddrPortFrom(a, 53)
		if !slices.Contains(out, ap) {
			out = append(out, ap)
		}
	}
	return out
}
