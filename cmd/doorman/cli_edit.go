package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/sandbox"
)

// reloadTimeout bounds how long an edit waits for the proxy to confirm
// it loaded the new policy (it polls the file twice a second).
const reloadTimeout = 3 * time.Second

// editHelp is the part of every edit command's help about when a change
// is in force.
const editHelp = `The change is validated first (an invalid entry is reported and nothing
changes), written atomically, and in force within a second: the command
waits until the sandbox's proxy has loaded it, which includes closing the
established connections that lost permission. A change into or out of mode
none also stops or starts the proxy and swaps the ruleset.`

// errNothingChanged marks an edit refused because its input was wrong.
var errNothingChanged = errors.New("nothing changed")

// usageError is an edit refused for its input (exitUsage).
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// editFlags are the flags every edit command has.
type editFlags struct {
	noWait *bool
}

func addEditFlags(c *cli) editFlags {
	return editFlags{noWait: c.fs.Bool("no-wait", false, "do not wait for the proxy to confirm the change")}
}

func runAllow(args []string, stdout, stderr io.Writer) int {
	c := newCLI("allow", "SANDBOX ENTRY... | SANDBOX --inspect HOST [CONDITION...]", `
Adds entries to a sandbox's allowlist: example.com, *.example.com,
203.0.113.7, 10.0.0.0/8, [2001:db8::1]:443, each with an optional :port or
:lo-hi. Entries already there are left as they are.

With --inspect HOST, adds a request rule instead (see "Request rules" in
docs/policy.md): an allow rule of the CONDITIONs (METHOD, /path or /path/*,
query:KEY[=GLOB], header:NAME[=GLOB], json:PATH[=GLOB]; "*" for any
request), or with no CONDITION only starts inspecting HOST. --remove
removes that rule (with no CONDITION: every rule of HOST, and HOST is no
longer inspected); --default allow|deny sets what no rule matches gets.

`+sandboxArg+"\n\n"+editHelp, stdout, stderr)
	ef := addEditFlags(c)
	rf := addRuleFlags(c)
	if rf.wanted(args) {
		return c.editRule(args, ef, rf, conf.VerdictAllow)
	}
	s, entries, code := c.sandboxEntries(args)
	if s == nil {
		return code
	}
	var added, already []string
	return c.edit(s, ef, func(cur *conf.Policy) (*conf.Policy, error) {
		next := slices.Clone(cur.Entries)
		for _, e := range entries {
			if slices.ContainsFunc(next, e.Equal) {
				already = append(already, e.String())
				continue
			}
			next = append(next, e)
			added = append(added, e.String())
		}
		return cur.WithEntries(next), nil
	}, func(u *sandbox.Update) string {
		for _, a := range already {
			c.notef("%s was already allowed", a)
		}
		if len(added) > 0 && u.New.Mode != conf.ModeAllowlist {
			c.notef("mode is %s: entries take effect in mode allowlist", u.New.Mode)
		}
		if len(added) == 0 {
			return ""
		}
		return "added " + strings.Join(added, ", ")
	})
}

func runDeny(args []string, stdout, stderr io.Writer) int {
	c := newCLI("deny", "SANDBOX ENTRY... | SANDBOX --inspect HOST CONDITION...", `
Removes entries from a sandbox's allowlist. An entry without a port
removes that host's entries on every port; one with a port only that exact
entry. Naming a host the list admits through another entry (a wildcard, a
CIDR prefix) is an error, since removing nothing would leave it admitted.

With --inspect HOST, adds a deny rule of the CONDITIONs to HOST's request
rules instead (as "doorman allow --inspect" takes them; e.g. POST
/v1/messages json:tools[].type=web_search*); --remove removes that rule.

`+sandboxArg+"\n\n"+editHelp, stdout, stderr)
	ef := addEditFlags(c)
	rf := addRuleFlags(c)
	if rf.wanted(args) {
		return c.editRule(args, ef, rf, conf.VerdictDeny)
	}
	s, entries, code := c.sandboxEntries(args)
	if s == nil {
		return code
	}
	var removed []string
	var stillAdmitted []string
	return c.edit(s, ef, func(cur *conf.Policy) (*conf.Policy, error) {
		var problems []string
		next := slices.Clone(cur.Entries)
		for _, e := range entries {
			n := len(next)
			next = slices.DeleteFunc(next, func(f conf.Entry) bool {
				if sameHostAndPorts(e, f) {
					removed = append(removed, f.String())
					return true
				}
				return false
			})
			if n != len(next) {
				continue
			}
			if by, ok := admittedBy(next, e); ok {
				problems = append(problems, fmt.Sprintf("%s is not an entry, but %s admits it: deny %s (or narrow it)", e, by, by))
			} else {
				c.notef("%s was not allowed", e)
			}
		}
		if len(problems) > 0 {
			return nil, &usageError{strings.Join(problems, "\n") + "\n" + errNothingChanged.Error()}
		}
		for _, e := range entries {
			if by, ok := admittedBy(next, e); ok {
				stillAdmitted = append(stillAdmitted, fmt.Sprintf("%s is still admitted by %s", e, by))
			}
		}
		return cur.WithEntries(next), nil
	}, func(u *sandbox.Update) string {
		for _, s := range stillAdmitted {
			c.notef("%s", s)
		}
		if len(removed) == 0 {
			return ""
		}
		return "removed " + strings.Join(removed, ", ")
	})
}

// sandboxEntries parses the arguments of allow and deny, SANDBOX ENTRY...,
// and finds the sandbox; with a nil sandbox, the command exits with code.
func (c *cli) sandboxEntries(args []string) (*sandbox.State, []conf.Entry, int) {
	pos, code, ok := c.parse(args, 2, -1)
	if !ok {
		return nil, nil, code
	}
	entries, ok := c.parseEntries(pos[1:])
	if !ok {
		c.errorf("%v", errNothingChanged)
		return nil, nil, exitUsage
	}
	s, code := c.find(pos[0])
	return s, entries, code
}

// sameHostAndPorts reports whether deny entry e removes entry f: the same
// host, and the same ports unless e has none.
func sameHostAndPorts(e, f conf.Entry) bool {
	if e.Ports.Any() {
		f.Ports = conf.PortRange{}
	}
	return e.Equal(f)
}

// admittedBy returns an entry of entries that admits some of what e names
// (on a port e names), other than e itself.
func admittedBy(entries []conf.Entry, e conf.Entry) (conf.Entry, bool) {
	for _, f := range entries {
		if !portsOverlap(e.Ports, f.Ports) || e.Equal(f) {
			continue
		}
		g := f
		g.Ports = conf.PortRange{}
		switch e.Kind {
		case conf.KindName:
			if g.MatchName(e.Name, 0) {
				return f, true
			}
		case conf.KindWildcard:
			// Any name below e.Name, e.g. "x." + e.Name.
			if g.Kind != conf.KindPrefix && g.MatchName("x."+e.Name, 0) {
				return f, true
			}
		case conf.KindPrefix:
			if f.Kind == conf.KindPrefix && f.Prefix.Bits() <= e.Prefix.Bits() && f.Prefix.Contains(e.Prefix.Addr()) {
				return f, true
			}
		}
	}
	return conf.Entry{}, false
}

func portsOverlap(a, b conf.PortRange) bool {
	return a.Any() || b.Any() || (a.Lo <= b.Hi && b.Lo <= a.Hi)
}

func runMode(args []string, stdout, stderr io.Writer) int {
	c := newCLI("mode", "SANDBOX none|allowlist|open", `
Sets a sandbox's mode; its entries are kept. none: nothing leaves (no proxy,
deny-all ruleset). allowlist: only what an entry admits. open: everything,
every connection still logged (the learning mode).

`+sandboxArg+"\n\n"+editHelp, stdout, stderr)
	ef := addEditFlags(c)
	pos, code, ok := c.parse(args, 2, 2)
	if !ok {
		return code
	}
	m, err := conf.ParseMode(pos[1])
	if err != nil {
		c.errorf("%v; %v", err, errNothingChanged)
		return exitUsage
	}
	s, code := c.find(pos[0])
	if s == nil {
		return code
	}
	return c.edit(s, ef, func(cur *conf.Policy) (*conf.Policy, error) {
		return cur.WithMode(m), nil
	}, func(u *sandbox.Update) string {
		if u.Old.Mode == u.New.Mode {
			return ""
		}
		return fmt.Sprintf("mode %s -> %s", u.Old.Mode, u.New.Mode)
	})
}

func runSet(args []string, stdout, stderr io.Writer) int {
	c := newCLI("set", "SANDBOX --file FILE", `
Replaces a sandbox's policy with the policy file FILE ("-": standard input),
in the plain form: an optional "mode: none|allowlist|open" line (default
allowlist), then one entry per line, '#' comments. "doorman learn" prints
one. An empty file is refused: write "mode: none" to deny everything.

`+sandboxArg+"\n\n"+editHelp, stdout, stderr)
	ef := addEditFlags(c)
	file := c.fs.String("file", "", "the policy `file` to put in force (- for standard input)")
	pos, code, ok := c.parse(args, 1, 1)
	if !ok {
		return code
	}
	if *file == "" {
		c.errorf("--file is required")
		return exitUsage
	}
	var data []byte
	var err error
	where := *file
	if *file == "-" {
		data, err = io.ReadAll(os.Stdin)
		where = "standard input"
	} else {
		data, err = os.ReadFile(*file)
	}
	if err != nil {
		c.errorf("%v; %v", err, errNothingChanged)
		return exitUsage
	}
	if strings.TrimSpace(string(data)) == "" {
		c.errorf("%s is empty: to deny everything, write \"mode: none\" (or \"mode: allowlist\" and no entries); %v", where, errNothingChanged)
		return exitUsage
	}
	p, err := conf.ParseFile(data)
	if err != nil {
		for _, line := range strings.Split(err.Error(), "\n") {
			c.errorf("%s: %s", where, line)
		}
		c.errorf("%v", errNothingChanged)
		return exitUsage
	}
	s, code := c.find(pos[0])
	if s == nil {
		return code
	}
	return c.update(s, ef, func() (*sandbox.Update, error) {
		return sandbox.UpdatePolicy(c.stateDir, s.Key, p)
	}, func(u *sandbox.Update) string { return "policy replaced" })
}

// edit applies fn to s's live policy (see sandbox.EditPolicy) and reports.
func (c *cli) edit(s *sandbox.State, ef editFlags, fn func(*conf.Policy) (*conf.Policy, error), what func(*sandbox.Update) string) int {
	return c.update(s, ef, func() (*sandbox.Update, error) {
		return sandbox.EditPolicy(c.stateDir, s.Key, fn)
	}, what)
}

// update runs do, waits for the proxy to load the change, and prints
// "KEY: WHAT (MODE, N entries)".
func (c *cli) update(s *sandbox.State, ef editFlags, do func() (*sandbox.Update, error), what func(*sandbox.Update) string) int {
	var offset int64
	if fi, err := os.Stat(s.LogFile); err == nil {
		offset = fi.Size()
	}
	u, err := do()
	var ue *usageError
	switch {
	case errors.As(err, &ue):
		c.errorf("%v", ue)
		return exitUsage
	case err != nil:
		return c.fail(err)
	}
	for _, n := range u.Notes {
		c.notef("%s", n)
	}
	msg := what(u)
	if !u.Changed {
		if msg == "" {
			msg = "nothing to change"
		} else {
			msg += "; policy unchanged"
		}
	}
	if msg == "" {
		msg = "policy rewritten"
	}
	state := fmt.Sprintf("%s, %s", u.New.Mode, plural(len(u.New.Entries), "entry", "entries"))
	switch {
	case u.ProxyStopped:
		state += "; proxy stopped, nothing leaves"
	case u.ProxyStarted:
		state += fmt.Sprintf("; proxy started (pid %d)", u.State.PID)
	case u.Changed && u.New.Mode != conf.ModeNone && !u.Reload:
		c.notef("the proxy of %s is not running: its TCP connections are refused until the container is restarted", s.Key)
	}
	if u.Reload && !*ef.noWait {
		ctx, cancel := context.WithTimeout(context.Background(), reloadTimeout)
		ev, err := decisionlog.WaitPolicy(ctx, s.LogFile, offset)
		cancel()
		switch {
		case err != nil:
			c.notef("the proxy did not confirm loading the change within %v (see %s)", reloadTimeout, s.LogFile)
		case !ev.Loaded:
			c.errorf("the proxy rejected the policy file and denies everything: %s", ev.Err)
			return exitFailed
		default:
			state += "; in force"
		}
	}
	fmt.Fprintf(c.stdout, "%s: %s (%s)\n", s.Key, msg, state)
	return exitOK
}
