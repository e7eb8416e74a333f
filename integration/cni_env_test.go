package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
)

// The fake internet every CNI test uses.
var (
	apiAddr4  = netip.MustParseAddr("203.0.113.10")
	apiAddr6  = netip.MustParseAddr("2001:db8:100::10")
	evilAddr4 = netip.MustParseAddr("203.0.113.20")
	evilAddr6 = netip.MustParseAddr("2001:db8:100::20")
	otherAddr = netip.MustParseAddr("203.0.113.30")
)

const (
	apiName   = "api.example.test"
	evilName  = "evil.example.test"
	otherName = "other.example.test"
)

// cniEnv is one test's world: the fake internet, a host namespace playing
// the runtime's, and doorman's directories.
type cniEnv struct {
	t                           *testing.T
	net                         *testnet.Net
	api, evil, other            *testnet.Host
	stateDir, logDir, policyDir string
	caFile                      string
	cni                         *libcni.CNIConfig
	ipamDir                     string
	nextID                      atomic.Int32

	mu   sync.Mutex
	keys []string // of every container made, for assertNothingLeft
}

func newCNIEnv(t *testing.T) *cniEnv {
	t.Helper()
	skipUnlessRoot(t)
	n := testnet.New(t)
	dir := t.TempDir()
	e := &cniEnv{
		t:         t,
		net:       n,
		api:       n.AddHost(apiName, apiAddr4, apiAddr6),
		evil:      n.AddHost(evilName, evilAddr4, evilAddr6),
		other:     n.AddHost(otherName, otherAddr),
		stateDir:  filepath.Join(dir, "state"),
		logDir:    filepath.Join(dir, "log"),
		policyDir: filepath.Join(dir, "policies"),
		ipamDir:   filepath.Join(dir, "ipam"),
		cni:       libcni.NewCNIConfig([]string{binDir}, nil),
	}
	e.caFile = n.WriteCA(dir)
	os.MkdirAll(e.policyDir, 0o755)
	t.Cleanup(e.assertNothingLeft)
	return e
}

// conflist is a bridge network (host-local IPAM on the range testnet keeps
// free for it) with doorman chained after it; extra is merged into
// doorman's entry.
func (e *cniEnv) conflist(extra map[string]any) *libcni.NetworkConfigList {
	e.t.Helper()
	doorman := map[string]any{
		"type":             "doorman",
		"mode":             "allowlist",
		"allowedHosts":     []string{apiName},
		"stateDir":         e.stateDir,
		"logDir":           e.logDir,
		"policyDir":        e.policyDir,
		"upstreamResolver": e.net.DNS.String(),
	}
	for k, v := range extra {
		if v == nil {
			delete(doorman, k)
		} else {
			doorman[k] = v
		}
	}
	list := map[string]any{
		"cniVersion": "1.1.0",
		"name":       "dmnet",
		"plugins": []any{
			map[string]any{
				"type":      "bridge",
				"bridge":    "dmbr0",
				"isGateway": true,
				"ipMasq":    false,
				"ipam": map[string]any{
					"type":    "host-local",
					"dataDir": e.ipamDir,
					"ranges": []any{
						[]any{map[string]any{"subnet": "198.51.100.128/26", "gateway": "198.51.100.129"}},
						[]any{map[string]any{"subnet": "2001:db8:3::/64", "gateway": "2001:db8:3::1"}},
					},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}, map[string]any{"dst": "::/0"}},
				},
				"dns": map[string]any{"nameservers": []string{e.net.DNS.String(), e.net.DNS6.String()}},
			},
			doorman,
		},
	}
	data, _ := json.Marshal(list)
	l, err := libcni.ConfListFromBytes(data)
	if err != nil {
		e.t.Fatalf("conflist: %v", err)
	}
	return l
}

// container is one attachment made through libcni.
type container struct {
	ns   *testnet.Netns
	rt   *libcni.RuntimeConf
	list *libcni.NetworkConfigList
	key  string
}

// newContainer makes an empty namespace for a container.
func (e *cniEnv) newContainer() *container {
	n := e.nextID.Add(1)
	ns := e.net.NewNetns(e.t, fmt.Sprintf("ctr%d", n))
	id := fmt.Sprintf("ctr%d%s", n, strings.ReplaceAll(filepath.Base(ns.Name()), "-", ""))
	e.mu.Lock()
	e.keys = append(e.keys, id+"-eth0")
	e.mu.Unlock()
	return &container{
		ns:  ns,
		rt:  &libcni.RuntimeConf{ContainerID: id, NetNS: ns.Path(), IfName: "eth0"},
		key: id + "-eth0",
	}
}

// add runs ADD of list for c in the host namespace (plugins run where the
// runtime runs; the proxy they start dials from there).
func (e *cniEnv) add(c *container, list *libcni.NetworkConfigList) (types.Result, error) {
	c.list = list
	var res types.Result
	err := e.net.InHost(func() error {
		var err error
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		res, err = e.cni.AddNetworkList(ctx, list, c.rt)
		return err
	})
	return res, err
}

// mustAdd is add that fails the test, and registers DEL as cleanup.
func (e *cniEnv) mustAdd(c *container, list *libcni.NetworkConfigList) types.Result {
	e.t.Helper()
	res, err := e.add(c, list)
	if err != nil {
		e.t.Fatalf("ADD: %v", err)
	}
	e.t.Cleanup(func() { e.del(c) })
	return res
}

func (e *cniEnv) del(c *container) error {
	return e.net.InHost(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return e.cni.DelNetworkList(ctx, c.list, c.rt)
	})
}

func (e *cniEnv) check(c *container) error {
	return e.net.InHost(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return e.cni.CheckNetworkList(ctx, c.list, c.rt)
	})
}

func (e *cniEnv) gc(list *libcni.NetworkConfigList, valid []types.GCAttachment) error {
	return e.net.InHost(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return e.cni.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: valid})
	})
}

// state is the recorded state of c.
func (e *cniEnv) state(c *container) *sandbox.State {
	e.t.Helper()
	s, err := sandbox.Load(e.stateDir, c.key)
	if err != nil {
		e.t.Fatalf("state of %s: %v", c.key, err)
	}
	return s
}

// decisions returns the decision lines logged for c.
func (e *cniEnv) decisions(c *container) []map[string]any {
	data, _ := os.ReadFile(filepath.Join(e.logDir, c.key+".log"))
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "connection" {
			out = append(out, m)
		}
	}
	return out
}

// waitHostDrop waits until c's log has a line of the host-side layer's
// drops with the given reason, and returns it.
func (e *cniEnv) waitHostDrop(c *container, reason string) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		data, _ := os.ReadFile(filepath.Join(e.logDir, c.key+".log"))
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			var m map[string]any
			// A packet line (the packets the layer logs one by one) or
			// a denials line (from its counters, or repeats).
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["verdict"] == "deny" && m["reason"] == reason &&
				(m["msg"] == "connection" || m["msg"] == "denials" && m["count"] != nil && m["count"].(float64) >= 1) {
				return m
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	data, _ := os.ReadFile(filepath.Join(e.logDir, c.key+".log"))
	e.t.Fatalf("no host-layer line %q for %s; log:\n%s", reason, c.key, data)
	return nil
}

// waitDecision waits until c's log has a line pred accepts.
func (e *cniEnv) waitDecision(c *container, pred func(map[string]any) bool) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for _, d := range e.decisions(c) {
			if pred(d) {
				return d
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	data, _ := os.ReadFile(filepath.Join(e.logDir, c.key+".log"))
	e.t.Fatalf("no matching decision line for %s; log:\n%s", c.key, data)
	return nil
}

func decided(name, verdict string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["name"] == name && m["verdict"] == verdict }
}

// assertNothingLeft runs after every test's own cleanups (DEL): no state,
// no proxy process of this test, no table in the containers' namespaces.
func (e *cniEnv) assertNothingLeft() {
	states, _ := sandbox.List(e.stateDir)
	for _, s := range states {
		e.t.Errorf("state left behind: %s (proxy pid %d)", s.Key, s.PID)
		sandbox.Teardown(e.stateDir, s.Key)
	}
	e.mu.Lock()
	keys := slices.Clone(e.keys)
	e.mu.Unlock()
	for _, dir := range proxyCgroupsLeft(keys) {
		e.t.Errorf("proxy cgroup left behind: %s", dir)
		removeCgroupTree(dir)
	}
}

// proxyCgroupsLeft lists the cgroups in doorman's slice, in every
// hierarchy, of the proxies of sandboxes keys.
func proxyCgroupsLeft(keys []string) []string {
	mounts, _ := cgroupMounts()
	var out []string
	for _, m := range mounts {
		if m.fstype != "cgroup" && m.fstype != "cgroup2" {
			continue
		}
		for _, k := range keys {
			found, _ := filepath.Glob(filepath.Join(m.mountpoint, sandbox.DefaultCgroupSlice, "doorman-"+k+"*"))
			out = append(out, found...)
		}
	}
	return out
}

// tablePresent reports whether c's namespace holds doorman's table.
func tablePresent(t *testing.T, c *container) bool {
	t.Helper()
	ok, err := enforce.Present(c.ns.Path())
	if err != nil {
		t.Fatalf("table present in %s: %v", c.ns.Path(), err)
	}
	return ok
}

// bridgeResult is the result of the bridge plugin for c, as libcni cached
// it: what doorman received as prevResult.
func (e *cniEnv) bridgeResult(c *container) []byte {
	e.t.Helper()
	var res types.Result
	err := e.net.InHost(func() error {
		var err error
		res, err = e.cni.GetNetworkListCachedResult(c.list, c.rt)
		return err
	})
	if err != nil || res == nil {
		e.t.Fatalf("cached result: %v", err)
	}
	data, err := json.Marshal(res)
	if err != nil {
		e.t.Fatal(err)
	}
	return data
}

// doormanVerb runs the doorman plugin alone, as a runtime would within the
// chain, with prevResult prev (nil for none). It returns stdout and the
// plugin's error (its CNI error JSON included).
func (e *cniEnv) doormanVerb(c *container, list *libcni.NetworkConfigList, verb string, prev []byte) ([]byte, error) {
	e.t.Helper()
	var conf map[string]any
	if err := json.Unmarshal(list.Plugins[len(list.Plugins)-1].Bytes, &conf); err != nil {
		e.t.Fatal(err)
	}
	conf["cniVersion"], conf["name"] = list.CNIVersion, list.Name
	if prev != nil {
		conf["prevResult"] = json.RawMessage(prev)
	}
	stdin, _ := json.Marshal(conf)
	var out, errOut bytes.Buffer
	err := e.net.InHost(func() error {
		cmd := exec.Command(doormanBin())
		cmd.Env = []string{
			"CNI_COMMAND=" + verb, "CNI_CONTAINERID=" + c.rt.ContainerID, "CNI_NETNS=" + c.rt.NetNS,
			"CNI_IFNAME=" + c.rt.IfName, "CNI_PATH=" + binDir, "PATH=/usr/sbin:/usr/bin:/sbin:/bin",
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), &out, &errOut
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("doorman %s: %v: %s%s", verb, err, out.String(), errOut.String())
		}
		return nil
	})
	return out.Bytes(), err
}

// reparse rebuilds a conflist after its fields were changed, so that the
// bytes libcni sends match (the version lives in the bytes too).
func (e *cniEnv) reparse(l *libcni.NetworkConfigList) *libcni.NetworkConfigList {
	e.t.Helper()
	var raw map[string]any
	json.Unmarshal(l.Bytes, &raw)
	raw["cniVersion"] = l.CNIVersion
	data, _ := json.Marshal(raw)
	out, err := libcni.ConfListFromBytes(data)
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// waitDNSDecision waits until c's log has a DNS filter line for name with verdict.
func (e *cniEnv) waitDNSDecision(c *container, name, verdict string) {
	e.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		data, _ := os.ReadFile(filepath.Join(e.logDir, c.key+".log"))
		sc := bufio.NewScanner(bytes.NewReader(data))
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil && m["msg"] == "dns" && m["verdict"] == verdict &&
				strings.TrimSuffix(fmt.Sprint(m["name"]), ".") == name {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	data, _ := os.ReadFile(filepath.Join(e.logDir, c.key+".log"))
	e.t.Fatalf("no dns %s line for %s; log:\n%s", verdict, name, data)
}

// The environment variables that make this test binary, re-executed by
// checkInHost, run sandbox.Check and exit instead of running tests.
const (
	checkStateDirEnv = "DOORMAN_IT_CHECK_STATE_DIR"
	checkKeyEnv      = "DOORMAN_IT_CHECK_KEY"
)

func init() {
	dir, key := os.Getenv(checkStateDirEnv), os.Getenv(checkKeyEnv)
	if dir == "" || key == "" {
		return
	}
	if err := sandbox.Check(dir, key); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// checkInHost runs sandbox.Check for key in a process of its own in the
// host namespace, where the plugin or hook ran and the host-side layer
// lives. Not in this process under InHost: the check looks for the layer
// in /proc/self/ns/net, which names the namespace of the process's main
// thread, not that of a thread switched into another namespace.
func (e *cniEnv) checkInHost(key string) error {
	e.t.Helper()
	self, err := os.Executable()
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := e.net.HostCommand(ctx, self)
	cmd.Env = append(cmd.Env, checkStateDirEnv+"="+e.stateDir, checkKeyEnv+"="+key)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("sandbox.Check in the host namespace: %v: %s", err, bytes.TrimSpace(out))
	}
	return nil
}
