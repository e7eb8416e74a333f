package integration

import (
	"context"
	"fmt"
	"github.com/containernetworking/cni/libcni"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/hook"
	"github.com/doorman-net/doorman/integration/testnet"
)

// The escape suite's sandbox kinds, as docs/security.md names them.
const (
	escapeKindCNI     = "CNI sandbox"
	escapeKindCNIBare = "CNI sandbox with dnsFilter and hostLayer off"
	escapeKindDocker  = "Docker container"
	escapeKindDinD    = "DinD inner container"
)

// escapeImage is the Docker image holding the escape probe as /escape.
const escapeImage = "dm-escape:test"

// escapeCNI runs the matrix for containers attached through libcni (the
// bridge plugin with doorman chained after it, doorman's defaults: the DNS
// filter and the host-side layer on). The probe runs as root in the
// container's namespace through `ip netns exec` and first cuts its own
// capabilities down to Docker's default set (plus CAP_NET_ADMIN in the
// flushed mode), so that it holds what a container would. The label must
// be "full", so every row must be 0 bytes in both columns.
func escapeCNI(t *testing.T, bin string, writeDoc bool) *escapeKind {
	return escapeCNIKind(t, bin, "", writeDoc, &escapeKind{
		name: escapeKindCNI,
		setup: "libcni ADD of a conflist: bridge (host-local IPAM) with doorman chained after it with its defaults " +
			"(the DNS filter and the host-side layer on), run in a namespace playing the host; the probe runs as root " +
			"in the container's namespace (`ip netns exec`) with its capabilities cut down to Docker's default set, " +
			"plus CAP_NET_ADMIN in the second column. The label must be `full`, so every row must be 0 bytes, the " +
			"flushed column included: the host-side layer on the sandbox's veth holds what the flushed rules no longer do.",
	}, nil, true)
}

// escapeCNIBare runs the matrix for CNI sandboxes with both layers turned
// off: only the in-namespace rules hold, and the label must say so.
func escapeCNIBare(t *testing.T, bin string, writeDoc bool) *escapeKind {
	return escapeCNIKind(t, bin, "", writeDoc, &escapeKind{
		name: escapeKindCNIBare,
		setup: "As the CNI sandbox above, with `\"dnsFilter\": false` and `\"hostLayer\": false` in doorman's entry of " +
			"the conflist: only the rules inside the sandbox's namespace hold, DNS to the resolvers is not filtered, " +
			"and the label says both.",
	}, map[string]any{"dnsFilter": false, "hostLayer": false}, false)
}

// escapeCNIKind runs k's two columns on CNI sandboxes whose conflist has
// extra merged into doorman's entry; wantFull requires the label "full".
// pluginDir, if not "", is where libcni finds the plugins (another doorman
// binary); "" is the binaries under test.
func escapeCNIKind(t *testing.T, bin, pluginDir string, writeDoc bool, k *escapeKind, extra map[string]any, wantFull bool) *escapeKind {
	e := newCNIEnv(t)
	if pluginDir != "" {
		e.cni = libcni.NewCNIConfig([]string{pluginDir}, nil)
	}
	w := newEscapeLAN(t, e.net).world(e.net, e.api, e.evil, e.other)
	extra = maps.Clone(extra)
	if extra == nil {
		extra = map[string]any{}
	}
	extra["allowedHosts"] = escapeAllowed
	// The neighbour: another container on the same network.
	nc := e.newContainer()
	e.mustAdd(nc, e.conflist(extra))
	w.nbr = newEscapeNeighbour(t, e.net, nc.ns.Path(), "neighbour.cni.internal")
	addNeighbourRecords(e.net, &w)
	w.runtime = &escapeRuntime{ns: e.net.HostNS(), bridge: escapeCNIBridge, icmp: e.net.HostNS().RecordICMP(t, escapeCNIBridge)}
	for _, mode := range escapeModes {
		c := e.newContainer()
		e.mustAdd(c, e.conflist(extra))
		openPingGroupRange(t, c.ns)
		caps := "docker"
		if mode == modeFlushed {
			caps = "docker,NET_ADMIN"
		}
		st := e.state(c)
		if wantFull && st.Label != "full" {
			t.Fatalf("%s: label %q, want \"full\" (host layer %v, DNS filter %v)",
				mode, st.Label, st.HostLayer, st.DNSFilter)
		}
		s := &escapeSandbox{
			mode:      mode,
			state:     st,
			logFile:   st.LogFile,
			nsPath:    c.ns.Path(),
			runtimeNS: []string{e.net.HostPath()},
			probe: func(ctx context.Context, args ...string) (string, error) {
				cmd := c.ns.Command(ctx, bin, append([]string{"-caps", caps}, args...)...)
				var stderr strings.Builder
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					return "", fmt.Errorf("%v: %s", err, stderr.String())
				}
				return string(out), nil
			},
		}
		k.columns = append(k.columns, runEscapeColumn(t, w, s, writeDoc))
		if err := e.del(c); err != nil {
			t.Errorf("DEL: %v", err)
		}
	}
	return k
}

// escapeAllowed is every escape sandbox's allowlist: the allowed host,
// and the rebinding zone, whose names DNS answers with private addresses.
var escapeAllowed = []string{apiName, "*." + rebindZone}

// escapeCNIBridge is the bridge of the CNI conflist (cniEnv.conflist).
const escapeCNIBridge = "dmbr0"

// escapeLabels are the doorman labels of every escape container: allow
// escapeAllowed only.
func escapeLabels() []string {
	return []string{"--label", hook.AnnotationMode + "=allowlist", "--label", hook.AnnotationAllowedHosts + "=" + strings.Join(escapeAllowed, ",")}
}

// escapeDockerDefaults makes the runtime wrapper keep doorman's default
// for ICMP (the Docker tests' runtime.json turns it off) for the
// containers made until t ends: the escape suite measures the defaults.
func escapeDockerDefaults(t *testing.T, d *dockerEnv) {
	t.Helper()
	cfg := d.runtime
	cfg.AllowICMP = nil
	d.writeRuntimeConfig(t, cfg)
	t.Cleanup(func() { d.writeRuntimeConfig(t, d.runtime) })
}

// escapeDockerRuntime is the runtime's namespace of a Docker daemon's
// containers (nsPath: the daemon's) and its bridge.
func escapeDockerRuntime(t *testing.T, nsPath, bridge string) *escapeRuntime {
	t.Helper()
	x := testnet.OpenNetns(t, nsPath)
	return &escapeRuntime{ns: x, bridge: bridge, icmp: x.RecordICMP(t, bridge)}
}

// modeRunArgs are the `docker run` options of a mode.
func modeRunArgs(mode escapeMode) []string {
	if mode == modeFlushed {
		return []string{"--cap-add", "NET_ADMIN"}
	}
	return nil
}

// dockerProbe runs the probe in container id through docker exec (cli
// runs the docker command line given).
func dockerProbe(cli func(args ...string) dockerResult, id string) func(context.Context, ...string) (string, error) {
	return func(_ context.Context, args ...string) (string, error) {
		r := cli(slices.Concat([]string{"exec", id, "/escape"}, args)...)
		if r.exit != 0 {
			return "", fmt.Errorf("%v", r)
		}
		return r.stdout, nil
	}
}

// escapeDocker runs the matrix for containers of the test's dockerd, whose
// default runtime is doorman's runc wrapper.
func escapeDocker(t *testing.T, d *dockerEnv, lan *escapeLAN, image string, writeDoc bool) *escapeKind {
	w := lan.world(d.net, d.api, d.evil, d.other)
	w.runtime = escapeDockerRuntime(t, procNetNS(d.dockerd.Process.Pid), d.bridge)
	// The root namespace is the machine's: it must not take the rogue
	// router advertisements the probe sends (the runtime's namespace
	// still counts them).
	if err := w.runtime.ns.Do(func() error {
		return os.WriteFile("/proc/sys/net/ipv6/conf/"+d.bridge+"/accept_ra", []byte("0"), 0o644)
	}); err != nil {
		t.Fatalf("accept_ra on %s: %v", d.bridge, err)
	}
	nbr := d.mustDocker(slices.Concat([]string{"run", "--detach", "--name", "dm-escnbr-" + d.id}, d.runArgs(), escapeLabels(),
		[]string{image, "/escape", "sleep", "10m"})...)
	t.Cleanup(func() { d.docker("rm", "--force", nbr) })
	w.nbr = newEscapeNeighbour(t, d.net, procNetNS(d.pid(nbr)), "neighbour.docker.internal")
	addNeighbourRecords(d.net, &w)
	k := &escapeKind{
		name: escapeKindDocker,
		setup: "Docker 20.10 with doorman's runc wrapper as the default runtime (the OCI hook, with its defaults: the DNS " +
			"filter and the host-side layer, which the hook installs on the container's veth in dockerd's namespace once " +
			"libnetwork has wired it); the container runs " +
			"on the default bridge with doorman labels; `docker run` with Docker's default capabilities, then " +
			"with `--cap-add NET_ADMIN`; the probe runs through `docker exec`. Docker's default bridge gives the " +
			"container no IPv6 address, so the IPv6 row cannot leave whatever the rules say. The runtime.json keeps doorman's " +
			"default for ICMP. A second container with the same labels is the neighbour on the bridge; the root namespace " +
			"routes the test's LAN addresses to the fake internet's host namespace, and does not take router advertisements " +
			"on the test's bridge.",
	}
	for _, mode := range escapeModes {
		name := fmt.Sprintf("dm-esc%d-%s", mode, d.id)
		id := d.mustDocker(slices.Concat([]string{"run", "--detach", "--name", name}, d.runArgs(), escapeLabels(),
			modeRunArgs(mode), []string{image, "/escape", "sleep", "10m"})...)
		st := d.state(id)
		if st.Label != "full" {
			t.Fatalf("%s: label %q, want \"full\" (host layer %v, DNS filter %v)", mode, st.Label, st.HostLayer, st.DNSFilter)
		}
		s := &escapeSandbox{
			mode:      mode,
			state:     st,
			logFile:   st.LogFile,
			nsPath:    procNetNS(d.pid(id)),
			runtimeNS: []string{procNetNS(d.dockerd.Process.Pid)}, // dockerd's: the root namespace
			probe:     dockerProbe(d.docker, id),
		}
		k.columns = append(k.columns, runEscapeColumn(t, w, s, writeDoc))
		d.mustDocker("rm", "--force", id)
		waitGone(t, st.PID)
	}
	return k
}

// escapeDinD runs the matrix for containers of a Docker daemon that runs
// inside a doorman sandbox (the outer container, allowed api and other),
// with doorman's wrapper as its default runtime too.
func escapeDinD(t *testing.T, d *dockerEnv, lan *escapeLAN, image string, writeDoc bool) *escapeKind {
	e := newDinD(t, d, "--label", hook.AnnotationMode+"=allowlist",
		"--label", hook.AnnotationAllowedHosts+"="+strings.Join(append(escapeAllowed, otherName), ","))
	inner := e.innerRuntime
	inner.AllowICMP = nil // doorman's default, as for the outer container
	e.writeInnerRuntimeConfig(t, inner)
	if r := e.dockerStdin(openFile(t, filepath.Join(d.dir, "escape-rootfs.tar")), "exec", "--interactive", e.outer, dindDocker, "import", "-", image); r.exit != 0 {
		t.Fatal(r)
	}
	w := lan.world(d.net, d.api, d.evil, d.other)
	w.runtime = escapeDockerRuntime(t, procNetNS(e.outerPID), "docker0")
	nbr := e.mustInner(slices.Concat([]string{"run", "--detach", "--name", "dm-escnbr"}, e.runArgs(), escapeLabels(),
		[]string{image, "/escape", "sleep", "10m"})...)
	nbrPID := e.mustInner("inspect", "--format", "{{.State.Pid}}", nbr)
	w.nbr = newEscapeNeighbour(t, d.net, e.hostPath("/proc/"+nbrPID+"/ns/net"), "neighbour.dind.internal")
	// No rebinding names for the inner neighbour: every connection the
	// inner proxy makes goes through the outer container's proxy, which
	// dials from the root namespace, where the inner bridge is not routed.
	k := &escapeKind{
		name: escapeKindDinD,
		setup: "an outer container (itself a doorman sandbox allowing api.example.test and other.example.test, " +
			"with the capabilities a Docker daemon needs) runs Docker 20.10 with doorman's wrapper as its default " +
			"runtime (with its defaults: the DNS filter, and the host-side layer in the outer container's namespace, " +
			"where the inner daemon wires the inner container's veth); the inner container runs on the inner default " +
			"bridge with doorman labels, with the inner " +
			"Docker's default capabilities, then with `--cap-add NET_ADMIN`; the probe runs through a nested `docker exec`. " +
			"Everything the inner container sends is forwarded through the outer sandbox, whose rules stay in place " +
			"in both columns (only the inner container's own ruleset is flushed). The inner default bridge gives the " +
			"container no IPv6 address. Both runtime.json files keep doorman's default for ICMP, and the outer policy also " +
			"allows the rebinding zone. A second inner container is the neighbour on the inner bridge; the runtime's " +
			"namespace is the outer container's.",
	}
	for _, mode := range escapeModes {
		name := fmt.Sprintf("dm-esc%d", mode)
		id := e.mustInner(slices.Concat([]string{"run", "--detach", "--name", name}, e.runArgs(), escapeLabels(),
			modeRunArgs(mode), []string{image, "/escape", "sleep", "10m"})...)
		st, err := e.innerState(id)
		if err != nil {
			t.Fatalf("inner doorman state of %s: %v", id, err)
		}
		if st.Label != "full" {
			t.Fatalf("%s: inner label %q, want \"full\" (host layer %v, DNS filter %v)", mode, st.Label, st.HostLayer, st.DNSFilter)
		}
		nsPath := ""
		if pid := e.mustInner("inspect", "--format", "{{.State.Pid}}", id); pid != "" && pid != "0" {
			// The inner pid, in the outer container's own /proc.
			nsPath = e.hostPath("/proc/" + pid + "/ns/net")
		}
		s := &escapeSandbox{
			mode:      mode,
			state:     st,
			logFile:   e.innerLog(id),
			nsPath:    nsPath,
			runtimeNS: []string{procNetNS(e.outerPID), procNetNS(d.dockerd.Process.Pid)},
			probe:     dockerProbe(e.inner, id),
		}
		k.columns = append(k.columns, runEscapeColumn(t, w, s, writeDoc))
		e.removeInnerContainer(t, id, st)
	}
	return k
}

// importEscapeImage imports a rootfs holding only the probe (as /escape)
// into the test's dockerd, keeping the archive for the inner daemon.
func importEscapeImage(t *testing.T, d *dockerEnv, bin string) string {
	t.Helper()
	rootfs := filepath.Join(d.dir, "escape-rootfs")
	for _, sub := range []string{"etc", "tmp", "proc", "sys", "dev"} {
		if err := os.MkdirAll(filepath.Join(rootfs, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := copyFile(bin, filepath.Join(rootfs, "escape"), 0o755); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(d.dir, "escape-rootfs.tar")
	if err := writeTar(archive, rootfs); err != nil {
		t.Fatalf("archive the escape rootfs: %v", err)
	}
	if r := d.dockerStdin(openFile(t, archive), "import", "-", escapeImage); r.exit != 0 {
		t.Fatal(r)
	}
	return escapeImage
}

// openFile opens path for reading until t ends.
func openFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}
