package main

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/kube/agentclient"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/sandbox"
	"github.com/doorman-net/doorman/sandbox/status"
)

func runLs(args []string, stdout, stderr io.Writer) int {
	c := newCLI("ls", "[-o json] [--all]", `
Lists every enforced sandbox on this host: id (for a Kubernetes pod,
<namespace>/<pod name>), container name, runtime path (cni or hook),
policy mode and number of entries, proxy health, how many times its
supervisor replaced a proxy that died ("-" for a proxy an earlier release
started), connections allowed and denied since it was enforced, DNS
queries its DNS filter refused ("-" without the filter), and its
enforcement label. Proxy health is up; restarting (no proxy runs: its
supervisor starts the next, and meanwhile the sandbox's TCP waits or is
refused); unresponsive (its proxy runs but serves nothing: it is stopped,
or answers no heartbeat of its supervisor's, which replaces it at the
heartbeat timeout); crashloop (its proxies keep dying soon after they start);
unsupervised (it runs, but its supervisor is gone: nothing replaces it if
it dies); stopped (doorman stop); down (nothing runs: its TCP is refused);
none (mode none has no proxy); n/a (not enforced). A pod in a namespace
the CNI configuration excludes is listed with the label "n/a (excluded
namespace)". -o json has the DNS filter's counts under "dnsQueries", and
under "proxy" the supervisor, the last exit and the cgroup.

--all also lists, after the sandboxes, the network namespaces of this
host's processes that doorman does not enforce (label "unenforced"): no
sandbox is recorded on them and they hold no doorman table, such as the
pods a node started before doorman joined its CNI configuration. Each is
named by a path to it (a runtime's bind mount, else /proc/PID/ns/net), its
first process and pid, and the Kubernetes pod its cgroup names.`, stdout, stderr)
	out := c.outputFlag()
	all := c.fs.Bool("all", false, "also list the network namespaces doorman does not enforce")
	c.fs.BoolVar(all, "a", false, "same as --all")
	if _, code, ok := c.parseOutput(args, 0, 0, out); !ok {
		return code
	}
	states, err := sandbox.List(c.stateDir)
	if err != nil {
		return c.fail(err)
	}
	infos := make([]*status.Info, 0, len(states))
	for _, s := range states {
		infos = append(infos, status.Describe(s))
	}
	var unenforced []status.Unenforced
	if *all {
		if unenforced, err = status.UnenforcedNamespaces(status.LiveHost{}, states); err != nil {
			return c.fail(err)
		}
	}
	if *out == "json" {
		if !*all {
			return c.writeJSON(infos)
		}
		rows := make([]any, 0, len(infos)+len(unenforced))
		for _, i := range infos {
			rows = append(rows, i)
		}
		for _, u := range unenforced {
			rows = append(rows, u)
		}
		return c.writeJSON(rows)
	}
	// A container on several networks has one sandbox per interface:
	// show their keys, which tell them apart.
	perID := map[string]int{}
	for _, s := range states {
		perID[s.ID]++
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tRUNTIME\tKIND\tMODE\tENTRIES\tPROXY\tRESTARTS\tALLOWED\tDENIED\tDNS DENIED\tLABEL")
	for _, i := range infos {
		id := shortID(i.ID)
		if perID[i.ID] > 1 {
			id = i.Key
		}
		entries := fmt.Sprint(i.Entries)
		if i.Entries < 0 {
			entries = "-"
		}
		dnsDenied := "-"
		if i.State().DNSFilter {
			dnsDenied = fmt.Sprint(i.DNS.Denied)
		}
		restarts := "-"
		if i.State().Supervisor != nil {
			restarts = fmt.Sprint(i.Proxy.Restarts)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n",
			id, orDash(i.Name), i.Runtime, i.RuntimeKind, i.Mode, entries, i.Proxy.Health, restarts, i.Allowed, i.Denied, dnsDenied, i.Label)
	}
	for _, u := range unenforced {
		fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\n", u.ID, u.Name(), u.LabelColumn())
	}
	if err := tw.Flush(); err != nil {
		return c.fail(err)
	}
	return exitOK
}

// showInfo is what show reports beyond status.Info.
type showInfo struct {
	*status.Info
	Policy    []string     `json:"policy"`
	Resolvers []netip.Addr `json:"resolvers"`
	// ProxyResolvers are the servers the proxy resolves allowed names
	// with; none: the host's /etc/resolv.conf.
	ProxyResolvers []netip.AddrPort `json:"proxyResolvers"`
	AllowICMP      bool             `json:"allowICMP"`
	// ICMP says in words what ICMP may leave the sandbox.
	ICMP        string        `json:"icmp"`
	AllowDirect []conf.Direct `json:"allowDirect,omitempty"`
	// Inspect are the request rules, as the policy file's lines (the
	// placeholders as their SHA-256), and CADir the network's CA.
	Inspect []string `json:"inspect,omitempty"`
	CADir   string   `json:"caDir,omitempty"`
	// RuleSets are the rule sets in force, as "NAME@VERSION ACTION";
	// Warnings what the policy leaves open (an allowed name beside an
	// inspected one on a shared registrable domain).
	RuleSets []string               `json:"rulesets,omitempty"`
	Warnings []string               `json:"warnings,omitempty"`
	Recent   []decisionlog.Decision `json:"recent"`
	// Cluster is what the Kubernetes node agent last wrote for the pod
	// (its policy's sources, and what doorman could not express exactly
	// and how it erred closed), if the sandbox is a pod it computed.
	Cluster *clusterInfo `json:"cluster,omitempty"`
}

// clusterInfo is a pod's answer from the node agent's file.
type clusterInfo struct {
	File     string    `json:"file"`
	Computed time.Time `json:"computed"`
	Sources  []string  `json:"sources,omitempty"`
	Notes    []string  `json:"notes,omitempty"`
	Error    string    `json:"error,omitempty"`
}

// clusterOf reads what the node agent (its files under dir) last wrote
// for pod sandbox s; nil if s is no pod or the agent wrote nothing.
func clusterOf(dir string, s *sandbox.State) *clusterInfo {
	ns, name, ok := strings.Cut(s.ID, "/")
	if s.Runtime != "cni" || !ok {
		return nil
	}
	a, err := agentclient.ReadFile(dir, ns, name, s.PodUID)
	if err != nil {
		return nil
	}
	return &clusterInfo{File: agentclient.PodFile(dir, ns, name), Computed: a.Computed, Sources: a.Sources, Notes: a.Notes, Error: a.Error}
}

// icmpSummary says what ICMP may leave sandbox s.
func icmpSummary(s *sandbox.State) string {
	const always = "errors of admitted flows and IPv6 neighbour discovery"
	switch {
	case s.Mode == conf.ModeNone:
		return always + " only (mode none)"
	case !s.AllowICMP:
		return always + " only (allowICMP off)"
	case len(s.AllowDirect) == 0:
		return always + " only (allowICMP on, but no allowDirect destination to ping)"
	}
	return "echo requests of at most 64 data bytes to allowDirect destinations; " + always
}

func runShow(args []string, stdout, stderr io.Writer) int {
	c := newCLI("show", "SANDBOX [-n N] [--agent-dir DIR] [-o json]", `
Shows one sandbox: its policy (for a pod the Kubernetes node agent
computed, what shaped it and what doorman could not express exactly and
how it erred closed), resolvers, enforcement label (for a pod,
its uid and the cgroup the runtime named), proxy pid and uptime, its
supervisor, how many times a proxy that died was replaced and how the last
one ended, the cgroup it runs in with its limits and usage, counts of
connections and of DNS queries (with the DNS filter on), and its most
recent decisions, DNS queries included.

`+sandboxArg, stdout, stderr)
	out := c.outputFlag()
	n := c.fs.Int("n", 10, "how many recent decisions to show")
	agentDir := c.fs.String("agent-dir", agentclient.DefaultDir, "the Kubernetes node agent's directory, for a pod's sources and notes")
	pos, code, ok := c.parseOutput(args, 1, 1, out)
	if !ok {
		return code
	}
	s, code := c.find(pos[0])
	if s == nil {
		return code
	}
	if s.Unenforced != "" {
		return c.showUnenforced(status.Describe(s), *out)
	}
	info := showInfo{Info: status.Describe(s), Resolvers: s.Resolvers, ProxyResolvers: s.ProxyResolvers, AllowICMP: s.AllowICMP,
		ICMP: icmpSummary(s), AllowDirect: s.AllowDirect}
	if info.ProxyResolvers == nil {
		info.ProxyResolvers = []netip.AddrPort{}
	}
	if pol := info.Info.Policy(); pol != nil {
		info.Policy = pol.Hosts()
		for i := range pol.Inspect {
			info.Inspect = append(info.Inspect, pol.Inspect[i].Lines()...)
		}
		for _, u := range pol.RuleSets {
			ref := u.Name
			if set, err := conf.LookupRuleSet(u.Name); err == nil {
				ref = set.Ref()
			}
			info.RuleSets = append(info.RuleSets, ref+" "+u.Action)
		}
		info.Warnings = pol.SiblingWarnings()
		if pol.HasInspection() {
			info.CADir = s.CADir
		}
	}
	if ds, _, err := decisionlog.ReadFile(s.LogFile, decisionlog.Filter{Since: s.Created}); err != nil {
		c.errorf("%v", err)
	} else {
		info.Recent = decisionlog.Last(ds, *n)
	}
	if info.Recent == nil {
		info.Recent = []decisionlog.Decision{}
	}
	info.Cluster = clusterOf(*agentDir, s)
	if *out == "json" {
		return c.writeJSON(info)
	}
	printShow(stdout, info, time.Now())
	return exitOK
}

func printShow(w io.Writer, i showInfo, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	i.identityRows(row, now)
	i.policyRows(row)
	i.clusterRows(row)
	i.networkRows(row)
	i.proxyRows(row, now)
	row("log", i.LogFile)
	row("state", i.StateDir)
	tw.Flush()
	fmt.Fprintln(w)
	if len(i.Recent) == 0 {
		fmt.Fprintln(w, "no decisions logged yet")
		return
	}
	fmt.Fprintln(w, "recent decisions:")
	for _, d := range i.Recent {
		fmt.Fprintln(w, "  "+decisionlog.Format(d))
	}
}

// showUnenforced is show of a sandbox doorman records but does not
// enforce: who it is and why, nothing of a policy or a proxy.
func (c *cli) showUnenforced(i *status.Info, out string) int {
	if out == "json" {
		return c.writeJSON(i)
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	showInfo{Info: i}.identityRows(row, time.Now())
	row("enforced", "no ("+i.Unenforced+"): doorman passed it through, with no policy, proxy or rules")
	row("state", i.StateDir)
	if err := tw.Flush(); err != nil {
		return c.fail(err)
	}
	return exitOK
}

// identityRows are show's rows on which sandbox it is.
func (i showInfo) identityRows(row func(k, v string), now time.Time) {
	row("sandbox", i.Key)
	row("id", i.ID)
	row("name", orDash(i.Name))
	if i.PodUID != "" {
		row("pod uid", i.PodUID)
	}
	if i.CgroupParent != "" {
		row("cgroup", i.CgroupParent)
	}
	rt := i.Runtime
	if i.Network != "" || i.IfName != "" {
		rt += fmt.Sprintf(" (network %s, interface %s)", orDash(i.Network), orDash(i.IfName))
	}
	if i.RuntimeKind != "-" {
		rt += ", " + i.RuntimeKind
	}
	row("runtime", rt)
	row("netns", i.NetNS)
	row("created", fmt.Sprintf("%s (%s ago)", i.Created.Local().Format(time.DateTime), roundAge(now.Sub(i.Created))))
	row("label", i.Label)
}

// policyRows are show's rows on the live policy.
func (i showInfo) policyRows(row func(k, v string)) {
	row("mode", i.Mode)
	switch {
	case i.PolicyError != "":
		row("policy", "does not load, so the proxy denies everything: "+i.PolicyError)
	case len(i.Policy) == 0:
		row("policy", "(no entries)")
	default:
		for n, h := range i.Policy {
			k := ""
			if n == 0 {
				k = "policy"
			}
			row(k, h)
		}
	}
	for n, l := range i.Inspect {
		k := ""
		if n == 0 {
			k = "inspect"
		}
		row(k, strings.TrimPrefix(l, "inspect "))
	}
	for n, r := range i.RuleSets {
		k := ""
		if n == 0 {
			k = "rulesets"
		}
		row(k, r+" (doorman "+version+"; doorman rulesets show)")
	}
	if i.CADir != "" {
		row("CA", i.CADir+" (doorman ca show)")
	}
	for n, w := range i.Warnings {
		k := ""
		if n == 0 {
			k = "warning"
		}
		row(k, w)
	}
}

// clusterRows are show's rows on what the node agent computed for a pod.
func (i showInfo) clusterRows(row func(k, v string)) {
	if i.Cluster == nil {
		return
	}
	row("cluster", fmt.Sprintf("%s (node agent, computed %s)", orDash(strings.Join(i.Cluster.Sources, ", ")), i.Cluster.Computed.Local().Format(time.DateTime)))
	if i.Cluster.Error != "" {
		row("refused", i.Cluster.Error)
	}
	for n, note := range i.Cluster.Notes {
		k := ""
		if n == 0 {
			k = "not exact"
		}
		row(k, note)
	}
}

// networkRows are show's rows on DNS, allowDirect and ICMP.
func (i showInfo) networkRows(row func(k, v string)) {
	row("resolvers", orDash(joinStrings(i.Resolvers)))
	lookups := joinStrings(i.ProxyResolvers)
	if lookups == "" {
		// No resolver of the sandbox's the proxy can reach (or a
		// sandbox recorded so by an older doorman).
		lookups = "this host's /etc/resolv.conf"
	}
	row("proxy dns", lookups)
	if len(i.AllowDirect) > 0 {
		row("allowDirect", joinStrings(i.AllowDirect))
	}
	row("icmp", i.ICMP)
}

// proxyRows are show's rows on the proxy and what it counted.
func (i showInfo) proxyRows(row func(k, v string), now time.Time) {
	p := i.Proxy
	up := func() string {
		if p.Started == nil {
			return fmt.Sprintf("pid %d", p.PID)
		}
		return fmt.Sprintf("pid %d, up %s", p.PID, roundAge(now.Sub(*p.Started)))
	}
	switch p.Health {
	case status.HealthUp:
		row("proxy", up())
	case status.HealthCrashLoop:
		what := "no proxy runs"
		if p.PID != 0 {
			what = up()
		}
		row("proxy", fmt.Sprintf("CRASH LOOP: %s; %d in a row ended soon after they started", what, p.Failures))
	case status.HealthRestarting:
		next := "now"
		if p.NextStart != nil {
			next = "in " + p.NextStart.Sub(now).Round(100*time.Millisecond).String()
		}
		row("proxy", fmt.Sprintf("RESTARTING: no proxy runs (the sandbox's TCP waits, or is refused); the next starts %s", next))
	case status.HealthUnsupervised:
		row("proxy", up()+"; NOT SUPERVISED: its supervisor is gone, nothing replaces it if it dies (doorman start restores it)")
	case status.HealthUnresponsive:
		row("proxy", up()+"; UNRESPONSIVE: "+p.Unresponsive+" (the sandbox's TCP waits meanwhile)")
	case status.HealthStopped:
		row("proxy", "STOPPED by an operator: the sandbox's TCP is refused (doorman start starts it)")
	case status.HealthDown:
		row("proxy", "NOT RUNNING: the sandbox's TCP connections are refused")
	default:
		row("proxy", "none (mode none: nothing leaves)")
	}
	if p.Health != status.HealthNone && p.Health != status.HealthStopped {
		i.supervisionRows(row, now)
	}
	counts := fmt.Sprintf("%d allowed, %d denied, %d failed upstream", i.Allowed, i.Denied, i.Errors)
	if i.CountError != "" {
		counts = i.CountError
	}
	row("connections", counts)
	if i.State() != nil && i.State().DNSFilter {
		dns := fmt.Sprintf("%d allowed, %d denied, %d failed upstream", i.DNS.Allowed, i.DNS.Denied, i.DNS.Errors)
		if i.CountError != "" {
			dns = i.CountError
		}
		row("dns queries", dns)
	}
}

// supervisionRows are show's rows on the proxy's supervisor and cgroup.
func (i showInfo) supervisionRows(row func(k, v string), now time.Time) {
	p := i.Proxy
	switch {
	case p.Supervisor == nil:
		row("supervisor", "none (a proxy an earlier release started: doorman start puts one under a supervisor)")
	case p.Supervisor.Alive && p.Supervisor.Started != nil:
		row("supervisor", fmt.Sprintf("pid %d, up %s", p.Supervisor.PID, roundAge(now.Sub(*p.Supervisor.Started))))
	case p.Supervisor.Alive:
		row("supervisor", fmt.Sprintf("pid %d", p.Supervisor.PID))
	default:
		row("supervisor", fmt.Sprintf("GONE (pid %d)", p.Supervisor.PID))
	}
	if p.Supervisor != nil {
		restarts := fmt.Sprint(p.Restarts)
		if e := p.LastExit; e != nil {
			restarts += fmt.Sprintf("; the last proxy (pid %d) %s after %v, %s ago", e.PID, e.Reason, time.Duration(e.Ran), roundAge(now.Sub(e.Time)))
		}
		row("restarts", restarts)
	}
	switch {
	case p.Cgroup != nil:
		where := "below the runtime's " + p.Cgroup.Parent
		if p.Cgroup.Slice {
			where = "doorman's slice"
		}
		l, u := p.Cgroup.Limits, p.Cgroup.Usage
		v := fmt.Sprintf("%s (%s): memory %s of %s, %d of %s pids, cpu weight %d", p.Cgroup.Path, where,
			formatBytes(u.Memory), formatLimit(l.Memory, formatBytes), u.Pids, formatLimit(l.Pids, func(n uint64) string { return fmt.Sprint(n) }), l.CPUWeight)
		switch {
		case l.SocketMemory != 0 && l.SocketMemory != cgroup.Max:
			v += fmt.Sprintf(", sockets' buffers %s of %s", formatBytes(u.SocketMemory), formatBytes(l.SocketMemory))
		case u.SocketMemory != 0:
			v += fmt.Sprintf(", sockets' buffers %s (in memory)", formatBytes(u.SocketMemory))
		}
		if p.Cgroup.Unreadable != "" {
			v = fmt.Sprintf("%s (%s): limits and usage not readable from here: %s", p.Cgroup.Path, where, p.Cgroup.Unreadable)
		}
		if p.Cgroup.Note != "" {
			v += "; " + p.Cgroup.Note
		}
		row("cgroup", v)
	case p.CgroupError != "":
		row("cgroup", "none, not limited: "+p.CgroupError)
	case p.Supervisor == nil:
		row("cgroup", "none (a proxy an earlier release started)")
	}
	for _, g := range p.LeftoverCgroups {
		row("leftover", g.Path+" (an earlier proxy's cgroup, not reachable from where it was stopped: the next start, stop or teardown removes it)")
	}
}

// formatLimit renders limit n with format, or "no limit".
func formatLimit(n uint64, format func(uint64) string) string {
	if n == cgroup.Max || n == 0 {
		return "no limit"
	}
	return format(n)
}

// formatBytes renders n bytes in MiB (KiB below one).
func formatBytes(n uint64) string {
	if n < 1<<20 {
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

// roundAge renders an age to the second, or in days and hours past two
// days.
func roundAge(d time.Duration) string {
	if d > 48*time.Hour {
		h := int(d.Round(time.Hour).Hours())
		return fmt.Sprintf("%dd%dh", h/24, h%24)
	}
	return d.Round(time.Second).String()
}

// joinStrings lists values for a row.
func joinStrings[T fmt.Stringer](values []T) string {
	s := make([]string, len(values))
	for i, v := range values {
		s[i] = v.String()
	}
	return strings.Join(s, ", ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
