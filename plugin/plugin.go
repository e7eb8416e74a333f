package plugin

import (
	"errors"
	"fmt"
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/sandbox"
)

// supportedVersions are the CNI spec versions doorman speaks.
var supportedVersions = version.PluginSupports("0.4.0", "1.0.0", "1.1.0")

// labelCNI is what a CNI sandbox's enforcement covers until the host-side
// layer exists: rules inside the sandbox only, which a workload holding
// CAP_NET_ADMIN can remove and one holding CAP_NET_RAW (which Docker and
// Podman grant by default) can send AF_PACKET frames around. The plugin
// cannot see the capabilities.
const labelCNI = "partial (in-namespace rules only: a container holding CAP_NET_ADMIN can remove them, one holding CAP_NET_RAW can send around them)"

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

func cmdAdd(args *skel.CmdArgs) error {
	n, err := parseNetConf(args.StdinData)
	if err != nil {
		return err
	}
	prev, err := n.prevResult()
	if err != nil {
		return err
	}
	spec, err := n.spec(args.StdinData, args, prev)
	if err != nil {
		return err
	}
	if args.Netns == "" {
		return types.NewError(types.ErrInvalidEnvironmentVariables, "doorman: CNI_NETNS is empty: nothing to enforce", "")
	}
	_, err = sandbox.Enforce(sandbox.Request{
		Attachment: sandbox.Attachment{
			Key:     sandboxKey(args.ContainerID, args.IfName),
			ID:      args.ContainerID,
			Name:    containerName(args),
			Runtime: "cni",
			Network: n.Name,
			IfName:  args.IfName,
			NetNS:   args.Netns,
			// The label says what enforcement covers when it
			// applies; in mode open the CLI shows n/a.
			Label:        labelCNI,
			Addrs:        ipamAddrs(prev, args.IfName),
			CgroupParent: n.RuntimeConfig.CgroupPath,
		},
		Spec:     spec,
		StateDir: n.StateDir,
	})
	if err != nil {
		return types.NewError(types.ErrInternal, "doorman: cannot enforce the policy", err.Error())
	}
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
	if _, err := n.prevResult(); err != nil {
		return err
	}
	if err := sandbox.Check(n.StateDir, sandboxKey(args.ContainerID, args.IfName)); err != nil {
		return types.NewError(types.ErrInternal, "doorman: sandbox not enforced as recorded", err.Error())
	}
	return nil
}

// cmdGC tears down this network's sandboxes that are not among the valid
// attachments the runtime lists.
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
		if err := sandbox.Teardown(n.StateDir, s.Key); err != nil {
			errs = append(errs, err)
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
