package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
)

func runRuleSets(args []string, stdout, stderr io.Writer) int {
	c := newCLI("rulesets", "[show NAME]", `
Lists the rule sets this doorman ships (name, version, what they stop),
or prints one set's rules: "doorman rulesets show closed-book". A policy
uses one with a line "ruleset NAME [deny|strip|probe]" (docs/rulesets.md
explains every line).`, stdout, stderr)
	pos, code, ok := c.parse(args, 0, 2)
	if !ok {
		return code
	}
	switch {
	case len(pos) == 0:
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tVERSION\tSUMMARY")
		for _, n := range conf.RuleSetNames() {
			s, err := conf.LookupRuleSet(n)
			if err != nil {
				return c.fail(err)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Name, s.Version, s.Summary)
		}
		if err := tw.Flush(); err != nil {
			return c.fail(err)
		}
		return exitOK
	case len(pos) == 2 && pos[0] == "show":
		data, err := conf.RuleSetSource(pos[1])
		if err != nil {
			c.errorf("no rule set %q (this doorman has %s)", pos[1], strings.Join(conf.RuleSetNames(), ", "))
			return exitUsage
		}
		if _, err := stdout.Write(data); err != nil {
			return c.fail(err)
		}
		return exitOK
	}
	c.fs.Usage()
	return exitUsage
}

// toolReport is what `doorman tools` prints for one host.
type toolReport struct {
	Host     string            `json:"host"`
	Requests int               `json:"requests"`
	Refused  int               `json:"refused"`
	Stripped int               `json:"stripped"`
	Tools    []toolSeen        `json:"tools"`
	Declared []declaredTool    `json:"declared"`
	Evidence []evidenceSeen    `json:"evidence"`
	rulesets map[string]string // tool ID -> what stops it
}

// toolSeen is a provider-side tool requests asked for.
type toolSeen struct {
	ID       string `json:"id"`
	Requests int    `json:"requests"`
	// StoppedBy names the shipped rule sets that stop it and how.
	StoppedBy string `json:"stoppedBy"`
}

// declaredTool is a tool type requests declared, and whether a rule set
// knows it.
type declaredTool struct {
	Type     string `json:"type"`
	Requests int    `json:"requests"`
	// Tool is the rule set tool it was found as, "" if none: it runs
	// in the sandbox, or no rule set knows it.
	Tool string `json:"tool,omitempty"`
}

// evidenceSeen is evidence of provider-side tool use in responses.
type evidenceSeen struct {
	ID        string `json:"id"`
	Responses int    `json:"responses"`
	// Unasked counts the responses whose request asked for no tool of
	// this ID: a tool ran that no request rule found.
	Unasked int `json:"unasked"`
}

func runTools(args []string, stdout, stderr io.Writer) int {
	c := newCLI("tools", "SANDBOX [--since DUR] [-o json]", `
The probe report: which provider-side tools a sandbox's requests asked
for, on every host a rule set covers, the rule set that stops each one,
every tool type the requests declared that no rule set knows (it runs in
the sandbox, or doorman does not know it yet), and the responses that
showed provider-side tool use. It reads the decision log's request lines,
so it reports what the sets in force saw: to learn what an agent uses
without stopping anything, give its sandbox "ruleset closed-book probe"
(nothing refused, nothing removed, everything recorded), run it, then
read this.

`+sandboxArg, stdout, stderr)
	out := c.outputFlag()
	since := c.fs.String("since", "", "only requests since a `time` or a duration ago (default: since the sandbox was enforced)")
	pos, code, ok := c.parseOutput(args, 1, 1, out)
	if !ok {
		return code
	}
	s, code := c.findEnforced(pos[0])
	if s == nil {
		return code
	}
	from := s.Created
	if *since != "" {
		t, err := decisionlog.ParseSince(*since, time.Now())
		if err != nil {
			c.errorf("%v", err)
			return exitUsage
		}
		from = t
	}
	ds, _, err := decisionlog.ReadFile(s.LogFile, decisionlog.Filter{Since: from})
	if err != nil {
		return c.fail(err)
	}
	reports := toolReports(ds)
	if *out == "json" {
		if reports == nil {
			reports = []*toolReport{}
		}
		return c.writeJSON(map[string]any{"sandbox": s.Key, "since": from, "hosts": reports})
	}
	name := s.Key
	if s.Name != "" {
		name += " (" + s.Name + ")"
	}
	if len(reports) == 0 {
		fmt.Fprintf(stdout, "sandbox %s: no request to a host a rule set covers since %s.\n", name, from.Local().Format(time.DateTime))
		fmt.Fprintln(stdout, `Give it "ruleset closed-book probe" (doorman set) to record which provider-side tools its requests use.`)
		return exitOK
	}
	fmt.Fprintf(stdout, "sandbox %s, since %s\n", name, from.Local().Format(time.DateTime))
	for _, r := range reports {
		fmt.Fprintf(stdout, "\n%s: %d requests judged by rule sets, %d refused, %d stripped\n", r.Host, r.Requests, r.Refused, r.Stripped)
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		if len(r.Tools) > 0 {
			fmt.Fprintln(tw, "  provider-side tool\trequests\tstopped by")
			for _, t := range r.Tools {
				fmt.Fprintf(tw, "  %s\t%d\t%s\n", t.ID, t.Requests, t.StoppedBy)
			}
		} else {
			fmt.Fprintln(tw, "  no provider-side tool asked for")
		}
		tw.Flush()
		var known, unknown []string
		for _, d := range r.Declared {
			s := d.Type + " (" + strconv.Itoa(d.Requests) + ")"
			if d.Tool != "" {
				known = append(known, s+" = "+d.Tool)
			} else {
				unknown = append(unknown, s)
			}
		}
		if len(known) > 0 {
			fmt.Fprintf(stdout, "  declared, provider-side: %s\n", strings.Join(known, ", "))
		}
		if len(unknown) > 0 {
			fmt.Fprintf(stdout, "  declared, not in any rule set (runs in the sandbox, or unknown to doorman): %s\n", strings.Join(unknown, ", "))
		}
		for _, e := range r.Evidence {
			note := "their requests asked for it"
			if e.Unasked > 0 {
				note = fmt.Sprintf("NOT COVERED in %d: the request asked for no such tool, a tool ran that no request rule found", e.Unasked)
			}
			fmt.Fprintf(stdout, "  evidence in %d responses: %s (%s)\n", e.Responses, e.ID, note)
		}
	}
	return exitOK
}

// toolReports aggregates the request lines of ds by host.
func toolReports(ds []decisionlog.Decision) []*toolReport {
	byHost := map[string]*toolReport{}
	var order []string
	for _, d := range ds {
		if !d.IsRequest() || d.RuleSet == "" {
			continue
		}
		r := byHost[d.Name]
		if r == nil {
			r = &toolReport{Host: d.Name, rulesets: map[string]string{}}
			byHost[d.Name] = r
			order = append(order, d.Name)
		}
		r.Requests++
		if d.Verdict == decisionlog.Deny {
			r.Refused++
		}
		if len(d.Removed) > 0 {
			r.Stripped++
		}
		whats := map[string]string{} // declared type -> tool ID
		var ids []string
		for _, t := range d.Tools {
			id, what := parseFinding(t)
			if !slices.Contains(ids, id) {
				ids = append(ids, id)
			}
			if what != "" {
				whats[what] = id
			}
		}
		for _, id := range ids {
			i := slices.IndexFunc(r.Tools, func(t toolSeen) bool { return t.ID == id })
			if i < 0 {
				r.Tools = append(r.Tools, toolSeen{ID: id, StoppedBy: stoppedBy(id)})
				i = len(r.Tools) - 1
			}
			r.Tools[i].Requests++
		}
		for _, typ := range d.Declared {
			i := slices.IndexFunc(r.Declared, func(t declaredTool) bool { return t.Type == typ })
			if i < 0 {
				r.Declared = append(r.Declared, declaredTool{Type: typ})
				i = len(r.Declared) - 1
			}
			r.Declared[i].Requests++
			if id := whats[typ]; id != "" {
				r.Declared[i].Tool = id
			}
		}
		for _, e := range d.Evidence {
			i := slices.IndexFunc(r.Evidence, func(x evidenceSeen) bool { return x.ID == e })
			if i < 0 {
				r.Evidence = append(r.Evidence, evidenceSeen{ID: e})
				i = len(r.Evidence) - 1
			}
			r.Evidence[i].Responses++
			if !slices.ContainsFunc(ids, func(id string) bool { return sameTool(id, e) }) {
				r.Evidence[i].Unasked++
			}
		}
	}
	var out []*toolReport
	for _, h := range order {
		r := byHost[h]
		if r.Tools == nil {
			r.Tools = []toolSeen{}
		}
		if r.Declared == nil {
			r.Declared = []declaredTool{}
		}
		if r.Evidence == nil {
			r.Evidence = []evidenceSeen{}
		}
		out = append(out, r)
	}
	return out
}

// sameTool reports whether a request's tool and a response's evidence
// are the same tool: the same ID, or the same provider's server tool
// marker ("anthropic.server_tool" for any Anthropic server tool).
func sameTool(tool, evidence string) bool {
	if tool == evidence {
		return true
	}
	tp, _, _ := strings.Cut(tool, ".")
	ep, rest, _ := strings.Cut(evidence, ".")
	return tp == ep && rest == "server_tool"
}

// parseFinding reads "ID at WHERE (WHAT)" back into ID and WHAT.
func parseFinding(s string) (id, what string) {
	id, rest, _ := strings.Cut(s, " ")
	if i := strings.LastIndex(rest, " ("); i >= 0 && strings.HasSuffix(rest, ")") {
		what = rest[i+2 : len(rest)-1]
	}
	return id, what
}

// stoppedBy names the shipped rule sets that stop a tool ID, and how.
func stoppedBy(id string) string {
	var out []string
	for _, n := range conf.RuleSetNames() {
		s, err := conf.LookupRuleSet(n)
		if err != nil {
			continue
		}
		refused, tool := false, false
		for _, p := range s.Providers {
			for _, r := range p.Rules {
				if r.ID == id && !r.With {
					refused = refused || r.Refuse
					tool = tool || !r.Refuse
				}
			}
		}
		switch {
		case tool && refused:
			out = append(out, s.Ref()+" (deny refuses it, strip removes it where it can)")
		case tool:
			out = append(out, s.Ref()+" (deny refuses it, strip removes it)")
		case refused:
			out = append(out, s.Ref()+" (refused in every action)")
		}
	}
	if len(out) == 0 {
		return "no rule set"
	}
	return strings.Join(out, "; ")
}
