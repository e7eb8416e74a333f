package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
)

// escapeKindGVisor is the escape suite's gVisor kind.
const escapeKindGVisor = "gVisor (runsc) container on a CNI sandbox"

// escapeGVisor runs the matrix's first column for a runsc container
// (gVisor's own network stack, `--net-raw` so that its raw and packet
// sockets exist) on a namespace the CNI chain wired with doorman's
// defaults, the probe run through `runsc exec` with Docker's default
// capabilities. gVisor's stack never passes the namespace's IP hooks: only
// the host-side layer (its redirect to the proxy and the DNS filter, its
// drops) holds it, and the label must still be full. The flushed column
// does not apply: the workload has no nftables of the namespace to flush
// (gVisor's sentry does not pass netlink's nftables through).
func escapeGVisor(t *testing.T, bin string, writeDoc bool) *escapeKind {
	k := &escapeKind{name: escapeKindGVisor,
		setup: "runsc `--network=sandbox --platform=systrap --net-raw` runs the probe as root in a container whose namespace " +
			"a libcni ADD of the CNI sandbox's conflist wired (bridge, then doorman with its defaults); the probe runs through " +
			"`runsc exec` with Docker's default capabilities. gVisor's network stack writes its frames to the veth through a " +
			"packet socket: none of them passes the namespace's IP hooks, and only the host-side layer holds them (its " +
			"redirect of TCP to the proxy and of DNS to the DNS filter, its drops). The label must be `full`, so every row " +
			"must be 0 bytes. The flushed column does not apply: gVisor gives the workload no nftables of the namespace."}
	r := newRunscEnv(t) // fails t without runsc: CI builds it
	r.runtime = append(r.runtime, "--net-raw")
	if err := copyFile(bin, filepath.Join(r.rootfs, "escape"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := newEscapeLAN(t, r.net).world(r.net, r.api, r.evil, r.other)
	c := r.cniEnv.newContainer()
	r.mustAdd(c, r.conflist(map[string]any{"allowedHosts": escapeAllowed}))
	w.runtime = &escapeRuntime{ns: r.net.HostNS(), bridge: escapeCNIBridge, icmp: r.net.HostNS().RecordICMP(t, escapeCNIBridge)}
	openPingGroupRange(t, c.ns)
	st := r.cniEnv.state(c)
	if st.Label != "full" {
		t.Fatalf("label %q, want full", st.Label)
	}
	g := r.newContainer("gvesc", withNetNS(c.ns.Path()), withoutHooks(), withNoCgroup(),
		withCaps("CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID",
			"CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP", "CAP_SYS_CHROOT"))
	r.runDetached(g)
	s := &escapeSandbox{
		mode:      modeDefaultCaps,
		state:     st,
		logFile:   st.LogFile,
		nsPath:    c.ns.Path(),
		runtimeNS: []string{r.net.HostPath()},
		probe: func(_ context.Context, args ...string) (string, error) {
			res := r.exec(g, append([]string{"/escape", "-caps", "docker"}, args...)...)
			if res.exit != 0 {
				return "", fmt.Errorf("%v", res)
			}
			return res.stdout, nil
		},
	}
	col := runEscapeColumn(t, w, s, writeDoc)
	if !strings.HasPrefix(col.label, "full") {
		t.Errorf("label %q", col.label)
	}
	k.columns = append(k.columns, col)
	return k
}
