package plugin

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/internal/phasetrace"
	"github.com/doorman-net/doorman/sandbox"
)

// supportedVersions are the CNI spec versions doorman speaks. 0.3.x is
// what the conflists of kindnet, flannel, Calico and Cilium say: it has
// ADD and DEL (DEL without prevResult), no CHECK (skel refuses it, and
// runtimes do not send it), no GC or STATUS.
var supportedVersions = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

// labelCNI is what a CNI sandbox's enforcement covers until the host-side
// layer exists: rules inside the sandbox only, which a workload holding
// CAP_NET_ADMIN can remove and one holding CAP_NET_RAW (which Docker and
// Podman grant by default) can send AF_PACKET frames around, and which a
// runtime with a network stack of its own (gVisor, a microVM) sends past
// altogether. The plugin cannot see the capabilities, nor the runtime,
// which starts nothing in the namespace before ADD (`doorman ls` tells
// the runtime's kind once it does: see sandbox.State.DetectRuntimeKind).
const labelCNI = "partial (in-namespace rules only: a container holding CAP_NET_ADMIN can remove them, one holding CAP_NET_RAW can send around them, and a runtime with a network stack of its own (gVisor, a microVM) sends past them)"

// Main runs the plugin: the runtime's CNI_COMMAND picks the verb.
func Main(ver string) {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    cmdAdd,
		Del:    cmdDel,
		Check:  cmdCheck,
		GC:     cmdGC,
		Status: cmdStatus,
	}, supportedVersions, "doorman "+ver+": holds containers to an allowlist of hosts")
}

// labelExcluded is the label of a pod in an excluded namespace, which
// doorman passes through untouched.
var labelExcluded = sandbox.LabelUnenforced(whyExcluded)

// whyExcluded is what the record of such a pod says.
const whyExcluded = "excluded namespace"

func cmdAdd(args *skel.CmdArgs) error {
	n, err := parseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := n.valid(); err != nil {
		return err
	}
	prev, err := n.prevResult()
	if err != nil {
		return err
	}
	if args.Netns == "" {
		return types.NewError(types.ErrInvalidEnvironmentVariables, "doorman: CNI_NETNS is empty: nothing to enforce", "")
	}
	kv := cniArgs(args.Args)
	a := sandbox.Attachment{
		Key:     sandboxKey(args.ContainerID, args.IfName),
		ID:      args.ContainerID,
		Name:    containerName(kv),
		Runtime: "cni",
		Network: n.Name,
		IfName:  args.IfName,
		NetNS:   args.Netns,
		// The label says what enforcement covers when it applies; in
		// mode open the CLI shows n/a.
		Label: labelCNI,
		Addrs: ipamAddrs(prev, args.IfName),
	}
	pod, isPod := podOf(kv)
	if isPod {
		a.ID, a.PodUID = pod.ID(), pod.UID
		if slices.Contains(n.ExcludeNamespaces, pod.Namespace) {
			return n.passThrough(a, pod, prev)
		}
	}
	if n.runtimeErr != nil {
		return types.NewError(types.ErrInvalidNetworkConfig, "doorman: "+oneLine(n.runtimeErr), "")
	}
	a.CgroupParent = n.RuntimeConfig.CgroupPath
	spec, err := n.spec(args, prev)
	if err != nil {
		return err
	}
	phasetrace.Mark("add.config")
	_, err = sandbox.Enforce(sandbox.Request{Attachment: a, Spec: spec, StateDir: n.StateDir})
	if errors.Is(err, sandbox.ErrRuntimeNetNS) {
		// Refused before anything was applied (skel's own check comes
		// only after ADD has run).
		return types.NewError(types.ErrInvalidNetNS, "doorman: CNI_NETNS "+args.Netns+": "+sandbox.ErrRuntimeNetNS.Error(), "")
	}
	if err != nil {
		return types.NewError(types.ErrInternal, "doorman: cannot enforce the policy", err.Error())
	}
	phasetrace.Mark("add.enforced")
	return types.PrintResult(prev, n.CNIVersion)
}

// passThrough lets pod, in one of the namespaces the network excludes
// (kube-system by default: cluster DNS and the CNI's own pods), through
// untouched: prevResult is its result, nothing is enforced, and the
// attachment is recorded as unenforced so that `doorman ls` shows it.
// The line on stderr goes to the runtime's log.
func (n *NetConf) passThrough(a sandbox.Attachment, pod Pod, prev *current.Result) error {
	if _, err := sandbox.RecordUnenforced(n.StateDir, a, whyExcluded); err != nil {
		return types.NewError(types.ErrInternal, "doorman: cannot record pod "+pod.ID(), err.Error())
	}
	fmt.Fprintf(os.Stderr, "doorman: pod %s (sandbox %s) is in excluded namespace %s: passed through, not enforced\n", pod.ID(), a.Key, pod.Namespace)
	return types.PrintResult(prev, n.CNIVersion)
}

func cmdDel(args *skel.CmdArgs) error {
	n, err := parseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	key := sandboxKey(args.ContainerID, args.IfName)
	if err := sandbox.Teardown(n.StateDir, key); err != nil {
		return types.NewError(types.ErrInternal, "doorman: cannot tear down", err.Error())
	}
	// A failed or interrupted ADD may have left the table without state:
	// it goes, unless it is another live sandbox's (the same container's
	// attachment to another network, whose ADD went through).
	if args.Netns != "" {
		if err := sandbox.RemoveOrphanRules(n.StateDir, key, args.Netns); err != nil {
			return types.NewError(types.ErrInternal, "doorman: cannot remove the ruleset", err.Error())
		}
	}
	return nil
}

func cmdCheck(args *skel.CmdArgs) error {
	n, err := parseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := n.valid(); err != nil {
		return err
	}
	if _, err := n.prevResult(); err != nil {
		return err
	}
	if err := sandbox.Check(n.StateDir, sandboxKey(args.ContainerID, args.IfName)); err != nil {
		return types.NewError(types.ErrInternal, "doorman: sandbox not enforced as recorded", err.Error())
	}
	return nil
}

// cmdGC tears down this network's sandboxes that are not among the valid
// attachments the runtime lists, leaving a deny-all ruleset and the
// host-side layer of those whose namespace still exists (see
// sandbox.Retire).
func cmdGC(args *skel.CmdArgs) error {
	n, err := parseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	valid := map[string]bool{}
	for _, a := range n.ValidAttachments {
		valid[sandboxKey(a.ContainerID, a.IfName)] = true
	}
	states, err := sandbox.List(n.StateDir)
	if err != nil {
		return types.NewError(types.ErrInternal, "doorman: gc", err.Error())
	}
	var errs []error
	for _, s := range states {
		if s.Runtime != "cni" || s.Network != n.Name || valid[s.Key] {
			continue
		}
		// The container may still run, its interface left by GC: its
		// namespace keeps a ruleset that denies everything, and the
		// host-side layer stays.
		denied, err := sandbox.Retire(n.StateDir, s.Key)
		if err != nil {
			errs = append(errs, err)
		}
		if denied {
			fmt.Fprintf(os.Stderr, "doorman: gc: sandbox %s is not among the runtime's attachments: torn down; its network namespace %s still exists, and keeps a ruleset that denies everything (and the host-side layer, if it had one, until the container's DEL)\n", s.Key, s.NetNS)
		}
	}
	if len(errs) > 0 {
		return types.NewError(types.ErrInternal, "doorman: gc", errors.Join(errs...).Error())
	}
	return nil
}

// cmdStatus reports whether this host can enforce: the state directory is
// writable and the kernel has what the ruleset needs.
func cmdStatus(args *skel.CmdArgs) error {
	n, err := parseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	if err := n.valid(); err != nil {
		// No ADD of this network can succeed.
		return types.NewError(types.ErrPluginNotAvailable, "doorman: "+oneLine(n.settingsErr), "")
	}
	if err := os.MkdirAll(n.StateDir, 0o700); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "doorman: state directory not usable", err.Error())
	}
	f, err := os.CreateTemp(n.StateDir, ".status-*")
	if err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "doorman: state directory not writable", err.Error())
	}
	f.Close()
	os.Remove(f.Name())
	if err := enforce.ProbeFib("/proc/self/ns/net"); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "doorman: kernel lacks nft fib", err.Error())
	}
	if _, err := os.Executable(); err != nil {
		return types.NewError(types.ErrPluginNotAvailable, "doorman: cannot find its own binary", fmt.Sprint(err))
	}
	return nil
}
