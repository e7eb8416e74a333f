package hook

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
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
	host, _ := os.ReadFile(hostResolvConf)
	return parseResolvConf(host)
}
