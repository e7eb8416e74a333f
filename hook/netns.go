package hook

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/hostconf"
)

// containerNetNS returns the path of the container's network namespace, or
// "" when the container shares the runtime's (no network namespace in its
// spec, or one that is the runtime's own).
//
// Where the spec names the namespace by path (runc joining a namespace
// prepared for it, Podman, CRI-O), that path is returned: it outlives the
// container's process, so the state recorded with it still names the
// namespace at poststop, when /proc/<pid> is gone and the ruleset must be
// removed from a namespace that lives on. The path must then name the
// namespace the container's process is in. Without a path, the namespace
// is the process's (/proc/<pid>/ns/net), which dies with it.
func containerNetNS(spec *specs.Spec, pid int) (string, error) {
	var netns *specs.LinuxNamespace
	if spec.Linux != nil {
		for i, n := range spec.Linux.Namespaces {
			if n.Type == specs.NetworkNamespace {
				netns = &spec.Linux.Namespaces[i]
			}
		}
	}
	if netns == nil {
		return "", nil
	}
	path := netns.Path
	if pid > 0 {
		procPath := fmt.Sprintf("/proc/%d/ns/net", pid)
		if path == "" {
			path = procPath
		} else {
			same, err := sameNetNS(path, procPath)
			if err != nil {
				return "", fmt.Errorf("network namespace of container process %d (the spec names %s): %w", pid, path, err)
			}
			if !same {
				return "", fmt.Errorf("the spec's network namespace %s is not the one container process %d is in", path, pid)
			}
		}
	}
	if path == "" {
		return "", fmt.Errorf("the state has no pid and the spec's network namespace no path: cannot find the container's network namespace")
	}
	same, err := sameNetNS(path, "/proc/self/ns/net")
	if err != nil {
		return "", fmt.Errorf("network namespace %s: %w", path, err)
	}
	if same {
		return "", nil
	}
	return path, nil
}

// sameNetNS reports whether two paths name the same namespace.
func sameNetNS(a, b string) (bool, error) {
	var sa, sb unix.Stat_t
	if err := unix.Stat(a, &sa); err != nil {
		return false, err
	}
	if err := unix.Stat(b, &sb); err != nil {
		return false, err
	}
	return sa.Dev == sb.Dev && sa.Ino == sb.Ino, nil
}

// dockerEmbeddedDNS is Docker's resolver inside containers on user-defined
// networks. It forwards from inside the container's namespace to the
// daemon's upstream servers, which therefore must be allowed too.
var dockerEmbeddedDNS = netip.MustParseAddr("127.0.0.11")

// resolvers returns the DNS servers the container may query: those of the
// resolv.conf it will see (a bind mount over /etc/resolv.conf, as Docker and
// Podman make, or the one in its rootfs), plus, where the container uses
// Docker's embedded DNS, the servers that resolver forwards to (see
// embeddedDNSUpstreams).
func resolvers(spec *specs.Spec, bundle string) ([]netip.Addr, error) {
	path := ""
	for _, m := range spec.Mounts {
		if filepath.Clean(m.Destination) == "/etc/resolv.conf" && m.Source != "" {
			path = m.Source
		}
	}
	if path == "" && spec.Root != nil {
		root := spec.Root.Path
		if !filepath.IsAbs(root) {
			root = filepath.Join(bundle, root)
		}
		path = filepath.Join(root, "etc/resolv.conf")
	}
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		return nil, fmt.Errorf("container resolv.conf %s: %w", path, err)
	}
	addrs := hostconf.ParseResolvConf(data)
	for _, a := range addrs {
		if a == dockerEmbeddedDNS {
			addrs = append(addrs, embeddedDNSUpstreams(spec.Annotations)...)
			break
		}
	}
	return addrs, nil
}
