package main

import (
	"context"
	"fmt"
	"io"
	"os/signal"
	"syscall"
	"time"

	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/decisionlog/learn"
)

func runLogs(args []string, stdout, stderr io.Writer) int {
	c := newCLI("logs", "SANDBOX [-f] [--denied] [--since DUR] [-n N] [-o json]", `
Prints a sandbox's decisions, one line per connection: time, verdict
(allow, deny, or error: allowed but the upstream failed), protocol, name,
original destination, and the rule that admitted it or why it was refused.
With the DNS filter on, each DNS query is a line too: "dns/udp" or
"dns/tcp", the name and type asked, the rcode answered, and why. A name
the policy does not admit is refused at the lookup, so its denial is a
DNS line and no connection follows. -o json prints the proxy's JSON lines
as they are ("msg" is "connection" or "dns").

`+sandboxArg, stdout, stderr)
	out := c.outputFlag()
	follow := c.fs.Bool("f", false, "keep printing decisions as they are logged, until interrupted")
	c.fs.BoolVar(follow, "follow", false, "same as -f")
	denied := c.fs.Bool("denied", false, "only denials")
	since := c.fs.String("since", "", "only decisions since a `time` or a duration ago (15m, 2h, 3d, 2006-01-02T15:04:05Z)")
	n := c.fs.Int("n", 0, "only the last `N` decisions (0: all) before following")
	pos, code, ok := c.parseOutput(args, 1, 1, out)
	if !ok {
		return code
	}
	f := decisionlog.Filter{Denied: *denied}
	if *since != "" {
		t, err := decisionlog.ParseSince(*since, time.Now())
		if err != nil {
			c.errorf("%v", err)
			return exitUsage
		}
		f.Since = t
	}
	s, code := c.findEnforced(pos[0])
	if s == nil {
		return code
	}
	emit := func(d decisionlog.Decision) error {
		var err error
		if *out == "json" {
			_, err = fmt.Fprintf(stdout, "%s\n", d.Raw)
		} else {
			_, err = fmt.Fprintln(stdout, decisionlog.Format(d))
		}
		return err
	}
	ds, offset, err := decisionlog.ReadFile(s.LogFile, f)
	if err != nil {
		return c.fail(err)
	}
	for _, d := range decisionlog.Last(ds, *n) {
		if err := emit(d); err != nil {
			return c.fail(err)
		}
	}
	if !*follow {
		return exitOK
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err = decisionlog.Follow(ctx, s.LogFile, offset, func(d decisionlog.Decision) error {
		if !f.Match(d) {
			return nil
		}
		return emit(d)
	})
	if err != nil {
		return c.fail(err)
	}
	return exitOK
}

func runLearn(args []string, stdout, stderr io.Writer) int {
	c := newCLI("learn", "SANDBOX [--wildcards] [--denied] [--any-port] [--since DUR]", `
Prints the smallest allowlist that admits the connections the sandbox was
seen making since it was enforced (or since --since): each named connection
by its name and port, each one without a name by its address and port. It
learns from what mode open let through, and from what mode allowlist let
through or refused for want of an entry, DNS lookups (A, AAAA, HTTPS,
SVCB) the DNS filter refused included: a query carries no port, so a name
only ever refused at the lookup is listed without one. The output is a
policy file:

  doorman learn SANDBOX > policy && doorman set SANDBOX --file policy

`+sandboxArg, stdout, stderr)
	wildcards := c.fs.Bool("wildcards", false, "collapse two or more names below a common parent into *.parent (never above the registrable domain)")
	denied := c.fs.Bool("denied", false, "learn from denials only: what would have to be added")
	anyPort := c.fs.Bool("any-port", false, "entries without ports")
	since := c.fs.String("since", "", "learn from decisions since a `time` or a duration ago (default: since the sandbox was enforced)")
	pos, code, ok := c.parse(args, 1, 1)
	if !ok {
		return code
	}
	var from time.Time
	if *since != "" {
		t, err := decisionlog.ParseSince(*since, time.Now())
		if err != nil {
			c.errorf("%v", err)
			return exitUsage
		}
		from = t
	}
	s, code := c.findEnforced(pos[0])
	if s == nil {
		return code
	}
	if from.IsZero() {
		from = s.Created
	}
	ds, _, err := decisionlog.ReadFile(s.LogFile, decisionlog.Filter{Since: from})
	if err != nil {
		return c.fail(err)
	}
	l := learn.From(ds, learn.Options{Wildcards: *wildcards, AnyPort: *anyPort, Denied: *denied})
	if l.Used == 0 && l.UsedDNS == 0 {
		c.errorf("nothing to learn from: no connection or DNS lookup an entry could admit in %s since %s (%d decisions)",
			s.LogFile, from.Local().Format(time.DateTime), len(ds))
		return exitFailed
	}
	name := s.Key
	if s.Name != "" {
		name += " (" + s.Name + ")"
	}
	sources := plural(l.Used, "connection", "connections")
	if l.UsedDNS > 0 {
		sources += " and " + plural(l.UsedDNS, "refused DNS lookup", "refused DNS lookups")
	}
	fmt.Fprintf(stdout, "# learned by doorman from %s of sandbox %s since %s\n",
		sources, name, from.Local().Format(time.RFC3339))
	if l.Skipped > 0 {
		fmt.Fprintf(stdout, "# (%s skipped: nothing an entry could admit)\n", plural(l.Skipped, "decision", "decisions"))
	}
	if l.Private > 0 {
		fmt.Fprintf(stdout, "# (%s refused as private upstreams or answers, not learned: only an address entry inside the range admits one, e.g. 10.0.0.0/8 or 10.1.2.3:6379)\n",
			plural(l.Private, "decision", "decisions"))
	}
	if l.QueriedOnly > 0 {
		fmt.Fprintf(stdout, "# (%s only looked up, never connected to: listed without a port, as a DNS query carries none)\n",
			plural(l.QueriedOnly, "name", "names"))
	}
	if _, err := stdout.Write(l.Policy().MarshalFile()); err != nil {
		return c.fail(err)
	}
	return exitOK
}
