package main

import (
	"fmt"
	"slices"
	"strings"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/sandbox"
)

// ruleFlags are allow's and deny's flags for request rules.
type ruleFlags struct {
	host, def *string
	remove    *bool
}

func addRuleFlags(c *cli) ruleFlags {
	return ruleFlags{
		host:   c.fs.String("inspect", "", "edit the request rules of `HOST` instead of the allowlist"),
		remove: c.fs.Bool("remove", false, "with --inspect: remove the rule given (none: stop inspecting HOST)"),
		def:    c.fs.String("default", "", "with --inspect: what a request no rule matches gets, `allow|deny`"),
	}
}

// wanted reports whether args ask for a rule edit.
func (rf ruleFlags) wanted(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if strings.HasPrefix(a, "-") && name == "inspect" {
			return true
		}
	}
	return false
}

// editRule is `doorman allow|deny SANDBOX --inspect HOST [CONDITION...]`:
// it adds (or, with --remove, removes) a rule of verdict for HOST, or sets
// its default.
func (c *cli) editRule(args []string, ef editFlags, rf ruleFlags, verdict string) int {
	pos, code, ok := c.parse(args, 1, -1)
	if !ok {
		return code
	}
	fail := func(format string, a ...any) int {
		c.errorf(format+"; %v", append(a, errNothingChanged)...)
		return exitUsage
	}
	e, err := conf.ParseEntry(*rf.host)
	if err != nil || (e.Kind != conf.KindName && e.Kind != conf.KindWildcard) || !e.Ports.Any() {
		return fail("--inspect %q: give a host name or *.name, without a port", *rf.host)
	}
	host := e.String()
	words := pos[1:]
	var rule *conf.Rule
	if len(words) > 0 {
		r, err := conf.ParseRuleWords(words)
		if err != nil {
			return fail("%s rule: %v", verdict, err)
		}
		rule = &r
	}
	if *rf.def != "" && *rf.def != conf.VerdictAllow && *rf.def != conf.VerdictDeny {
		return fail("--default %q: want allow or deny", *rf.def)
	}
	if verdict == conf.VerdictDeny && rule == nil && !*rf.remove && *rf.def == "" {
		return fail("deny --inspect %s: give the rule's CONDITIONs", host)
	}
	s, code := c.find(pos[0])
	if s == nil {
		return code
	}
	var what string
	return c.edit(s, ef, func(cur *conf.Policy) (*conf.Policy, error) {
		hosts := slices.Clone(cur.Inspect)
		i := slices.IndexFunc(hosts, func(h conf.InspectHost) bool { return h.Host == host })
		switch {
		case *rf.remove && rule == nil:
			if i < 0 {
				return nil, &usageError{fmt.Sprintf("%s is not inspected; %v", host, errNothingChanged)}
			}
			hosts = slices.Delete(hosts, i, i+1)
			what = "stopped inspecting " + host
			return cur.WithInspect(hosts)
		case i < 0:
			hosts = append(hosts, conf.InspectHost{Host: host})
			i = len(hosts) - 1
			what = "inspecting " + host
		}
		h := hosts[i]
		h.Allow, h.Deny = slices.Clone(h.Allow), slices.Clone(h.Deny)
		list := &h.Allow
		if verdict == conf.VerdictDeny {
			list = &h.Deny
		}
		if rule != nil {
			line := rule.String()
			j := slices.IndexFunc(*list, func(r conf.Rule) bool { return r.String() == line })
			switch {
			case *rf.remove && j < 0:
				return nil, &usageError{fmt.Sprintf("%s has no %s rule %q; %v", host, verdict, line, errNothingChanged)}
			case *rf.remove:
				*list = slices.Delete(*list, j, j+1)
				what = fmt.Sprintf("removed %s rule %q of %s", verdict, line, host)
			case j >= 0:
				c.notef("%s already has the %s rule %q", host, verdict, line)
			default:
				*list = append(*list, *rule)
				what = fmt.Sprintf("added %s rule %q to %s", verdict, line, host)
			}
		}
		if *rf.def != "" {
			h.Default = *rf.def
			what = strings.TrimPrefix(what+"; default "+*rf.def+" for "+host, "; ")
		}
		hosts[i] = h
		return cur.WithInspect(hosts)
	}, func(u *sandbox.Update) string {
		if u.New.Mode == conf.ModeAllowlist {
			if _, ok := u.New.MatchName(strings.TrimPrefix(host, "*."), 0); !ok && !strings.HasPrefix(host, "*.") {
				c.notef("no entry admits %s: its rules apply once one does (doorman allow %s %s)", host, s.Key, host)
			}
		}
		return what
	})
}
