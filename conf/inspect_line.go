package conf

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// The file form of request rules: lines that start with the word
// "inspect", the host, and what follows (see doc.go, "Request rules"):
//
//	inspect HOST                         terminate HOST, no rules (every request logged)
//	inspect HOST deny|allow COND...      a rule: every COND must hold ("*" alone: any request)
//	inspect HOST default allow|deny      what no rule matches gets
//	inspect HOST inject HEADER PLACEHOLDER SECRETFILE
//	inspect HOST max-body BYTES
//
// COND is METHOD (upper case, "GET|HEAD" for either), a path or path glob
// starting with '/', query:KEY[=GLOB], header:NAME[=GLOB] or
// json:PATH[=GLOB]; without "=GLOB" the key only has to be there. A value
// may be written as a Go string ("curl *" in quotes) to hold spaces, '#'
// or quotes.
const inspectWord = "inspect"

// isInspectLine reports whether a trimmed line is a request rule line.
func isInspectLine(line string) bool {
	w, _, _ := strings.Cut(line, " ")
	w, _, _ = strings.Cut(w, "\t")
	return strings.EqualFold(w, inspectWord)
}

// splitInspectLine splits a rule line into words: whitespace separates
// them, a '"' starts a Go string that runs to its closing quote (spaces,
// '#' and escapes inside), and a '#' at the start of a word outside
// quotes starts a comment.
func splitInspectLine(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(line); {
		c := line[i]
		switch {
		case c == '"':
			end := i + 1
			for end < len(line) && line[end] != '"' {
				if line[end] == '\\' {
					end++
				}
				end++
			}
			if end >= len(line) {
				return nil, errors.New("a quoted value has no closing '\"'")
			}
			s, err := strconv.Unquote(line[i : end+1])
			if err != nil {
				return nil, fmt.Errorf("quoted value %s: %v", line[i:end+1], err)
			}
			cur.WriteString(s)
			inWord = true
			i = end + 1
		case c == ' ' || c == '\t' || c == '\r':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
			i++
		case c == '#' && !inWord:
			i = len(line)
		default:
			cur.WriteByte(c)
			inWord = true
			i++
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// quoteWord renders a value so that splitInspectLine reads it back: as
// it is when it is plain, else as a Go string.
func quoteWord(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || r == '"' || r == '#' || r == '\\' || r < 0x20 || r >= 0x7f
	}) {
		return s
	}
	return strconv.Quote(s)
}

// InspectVerbs are the words that may follow "inspect HOST" in a rule
// line of the file form.
var InspectVerbs = []string{VerdictAllow, VerdictDeny, "default", "inject", "max-body"}

// inspectLines collects the rule lines of a file, host by host, in the
// order the hosts first appear.
type inspectLines struct {
	hosts []InspectHost
	index map[string]int
}

// add parses one rule line (already split) into the host it names.
func (l *inspectLines) add(words []string) error {
	if len(words) < 2 {
		return errors.New("inspect: want \"inspect HOST ...\"")
	}
	host, err := normalizeInspectHost(words[1])
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	if l.index == nil {
		l.index = map[string]int{}
	}
	i, ok := l.index[host]
	if !ok {
		i = len(l.hosts)
		l.index[host] = i
		l.hosts = append(l.hosts, InspectHost{Host: host})
	}
	h := &l.hosts[i]
	bad := func(format string, a ...any) error {
		return &InspectError{Host: host, Reason: fmt.Sprintf(format, a...)}
	}
	args := words[2:]
	if len(args) == 0 {
		return nil
	}
	switch verb, rest := strings.ToLower(args[0]), args[1:]; verb {
	case VerdictAllow, VerdictDeny:
		r, err := ParseRuleWords(rest)
		if err != nil {
			return bad("%s: %v", verb, err)
		}
		if verb == VerdictAllow {
			h.Allow = append(h.Allow, r)
		} else {
			h.Deny = append(h.Deny, r)
		}
	case "default":
		if len(rest) != 1 {
			return bad("default: want \"default allow\" or \"default deny\"")
		}
		if h.Default != "" {
			return bad("default set twice")
		}
		if d := strings.ToLower(rest[0]); d != VerdictAllow && d != VerdictDeny {
			return bad("default %q: want allow or deny", rest[0])
		}
		h.Default = strings.ToLower(rest[0])
	case "inject":
		if len(rest) != 3 {
			return bad("inject: want \"inject HEADER PLACEHOLDER SECRETFILE\"")
		}
		if !isToken(rest[0]) {
			return bad("inject: header %q: not a header name", rest[0])
		}
		sum, err := parsePlaceholder(rest[1])
		if err != nil {
			return bad("inject %s: %v", rest[0], err)
		}
		if !strings.HasPrefix(rest[2], "/") {
			return bad("inject %s: secret file %q: want an absolute path on the host", rest[0], rest[2])
		}
		h.Inject = append(h.Inject, Inject{Header: rest[0], PlaceholderSHA256: sum, SecretFile: rest[2]})
	case "max-body":
		if len(rest) != 1 {
			return bad("max-body: want \"max-body BYTES\"")
		}
		n, err := strconv.ParseInt(rest[0], 10, 64)
		if err != nil || n <= 0 {
			return bad("max-body %q: want a number of bytes", rest[0])
		}
		if h.MaxBody != 0 {
			return bad("max-body set twice")
		}
		h.MaxBody = n
	default:
		return bad("%q: want allow, deny, default, inject or max-body", args[0])
	}
	return nil
}

// ParseRuleWords parses a rule from its words, as in a rule line after
// "allow" or "deny" (and as `doorman allow --inspect` takes them): each a
// condition, or "*" alone for a rule that matches every request.
func ParseRuleWords(words []string) (Rule, error) {
	var r Rule
	if len(words) == 0 {
		return r, errors.New("no condition: write \"*\" for a rule that matches every request")
	}
	if len(words) == 1 && words[0] == "*" {
		return r, nil
	}
	for _, w := range words {
		key, value, hasValue := strings.Cut(w, "=")
		if !hasValue {
			value = "*"
		}
		switch {
		case strings.HasPrefix(w, "/"):
			if r.Path != "" {
				return r, fmt.Errorf("two paths, %q and %q", r.Path, w)
			}
			r.Path = w
		case strings.HasPrefix(key, "query:"):
			r.Query = append(r.Query, Cond{Key: strings.TrimPrefix(key, "query:"), Glob: value})
		case strings.HasPrefix(key, "header:"):
			r.Header = append(r.Header, Cond{Key: strings.TrimPrefix(key, "header:"), Glob: value})
		case strings.HasPrefix(key, "json:"):
			p, err := ParseJSONPath(strings.TrimPrefix(key, "json:"))
			if err != nil {
				return r, err
			}
			r.JSON = append(r.JSON, JSONCond{Path: p, Glob: value})
		case w != "" && strings.Trim(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZ|-") == "":
			if len(r.Methods) > 0 {
				return r, fmt.Errorf("methods given twice: write %s|%s", strings.Join(r.Methods, "|"), w)
			}
			for _, m := range strings.Split(w, "|") {
				if m == "" {
					return r, fmt.Errorf("method list %q has an empty method", w)
				}
				r.Methods = append(r.Methods, m)
			}
		default:
			return r, fmt.Errorf("%q: want METHOD, /path, query:KEY[=GLOB], header:NAME[=GLOB] or json:PATH[=GLOB]", w)
		}
	}
	return r, r.normalize()
}

// Words renders the rule's conditions in the form ParseRuleWords reads,
// in canonical order; "*" for a rule without conditions.
func (r Rule) Words() []string {
	var w []string
	if len(r.Methods) > 0 {
		w = append(w, strings.Join(r.Methods, "|"))
	}
	if r.Path != "" {
		w = append(w, quoteWord(r.Path))
	}
	cond := func(prefix, key, glob string) string {
		if glob == "*" {
			return quoteWord(prefix + key)
		}
		return prefix + key + "=" + quoteWord(glob)
	}
	for _, q := range r.Query {
		w = append(w, cond("query:", q.Key, q.Glob))
	}
	for _, h := range r.Header {
		w = append(w, cond("header:", h.Key, h.Glob))
	}
	for _, j := range r.JSON {
		w = append(w, cond("json:", j.Path.String(), j.Glob))
	}
	if len(w) == 0 {
		return []string{"*"}
	}
	return w
}

// String is the rule's words joined by spaces: what the decision log and
// the 403 page name it by.
func (r Rule) String() string { return strings.Join(r.Words(), " ") }

// Lines renders h as the rule lines of the file form, in canonical order:
// deny rules, allow rules, default, injections, max-body; a host with
// none of them is one line "inspect HOST".
func (h *InspectHost) Lines() []string {
	prefix := inspectWord + " " + h.Host + " "
	var out []string
	for _, r := range h.Deny {
		out = append(out, prefix+"deny "+r.String())
	}
	for _, r := range h.Allow {
		out = append(out, prefix+"allow "+r.String())
	}
	if h.Default != "" {
		out = append(out, prefix+"default "+h.Default)
	}
	for _, in := range h.Inject {
		out = append(out, prefix+"inject "+in.Header+" "+placeholderText(in.PlaceholderSHA256)+" "+quoteWord(in.SecretFile))
	}
	if h.MaxBody != 0 {
		out = append(out, prefix+"max-body "+strconv.FormatInt(h.MaxBody, 10))
	}
	if len(out) == 0 {
		out = append(out, inspectWord+" "+h.Host)
	}
	return out
}
