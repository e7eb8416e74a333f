package conf

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/doorman-net/doorman/internal/atomicfile"
)

// fileHeader opens every file MarshalFile renders.
const fileHeader = `# doorman policy: "mode: none|allowlist|open", then one entry per line.
# Entries: example.com, *.example.com, 203.0.113.7, 10.0.0.0/8, [2001:db8::1]:443,
# each optionally with :port or :lo-hi. '#' starts a comment.
# Request rules: "inspect HOST allow|deny CONDITION...", "inspect HOST default allow|deny",
# "inspect HOST inject HEADER PLACEHOLDER SECRETFILE", "inspect HOST max-body BYTES".
# Rule sets: "ruleset NAME [deny|strip|probe]" (doorman's own, see docs/rulesets.md).
`

// ParseFile parses the plain file form of a policy, the form that live
// edits rewrite: one entry per line; '#' starts a comment at the start of
// a line or after whitespace (an entry never holds whitespace, so "#"
// inside an entry is part of it, and an error); blank lines are ignored;
// one optional directive line "mode: <mode>" sets the mode (default
// allowlist). A line "mode:<port>" with no space, such as "mode:443", is an
// entry for a host named "mode", not a directive.
//
// Every error is reported (errors.Join), each naming its line number and
// the entry; on any error the result is nil.
func ParseFile(data []byte) (*Policy, error) {
	return parseFile("line ", data)
}

// parseFile is ParseFile with the text put before each line number
// ("line " or "/etc/doorman/x.policy:").
func parseFile(where string, data []byte) (*Policy, error) {
	data = bytes.TrimPrefix(data, []byte("\ufeff")) // a BOM some editors write
	var (
		errs     []error
		entries  []Entry
		mode     = ModeAllowlist
		modeLine int
		inspect  inspectLines
		sets     []RuleSetUse
	)
	for i, line := range strings.Split(string(data), "\n") {
		n := i + 1
		if t := strings.TrimSpace(line); isInspectLine(t) {
			// Rule lines may quote values that hold '#': they find
			// their own comments.
			words, err := splitInspectLine(t)
			if err == nil {
				err = inspect.add(words)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s%d: %w", where, n, err))
			}
			continue
		}
		if t := strings.TrimSpace(line); isRuleSetLine(t) {
			u, err := parseRuleSetLine(t)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s%d: %w", where, n, err))
				continue
			}
			if slices.ContainsFunc(sets, func(v RuleSetUse) bool { return v.Name == u.Name }) {
				errs = append(errs, fmt.Errorf("%s%d: ruleset %s: used twice", where, n, u.Name))
				continue
			}
			sets = append(sets, u)
			continue
		}
		line = strings.TrimSpace(stripComment(line))
		if line == "" {
			continue
		}
		value, isMode := modeDirective(line)
		switch {
		case !isMode:
			e, err := ParseEntry(line)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s%d: %w", where, n, err))
				continue
			}
			entries = append(entries, e)
		case modeLine != 0:
			errs = append(errs, fmt.Errorf("%s%d: mode set twice (first on line %d)", where, n, modeLine))
		default:
			modeLine = n
			m, err := ParseMode(value)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s%d: %w", where, n, err))
				continue
			}
			mode = m
		}
	}
	hosts, err := setInspect(inspect.hosts)
	if err != nil {
		if strings.HasSuffix(where, ":") {
			err = fmt.Errorf("%s %w", where, err)
		}
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return &Policy{Mode: mode, Entries: entries, Inspect: hosts, RuleSets: sets}, nil
}

// stripComment cuts line at the first '#' that starts it or follows
// whitespace.
func stripComment(line string) string {
	prevSpace := true
	for i, r := range line {
		if r == '#' && prevSpace {
			return line[:i]
		}
		prevSpace = unicode.IsSpace(r)
	}
	return line
}

// modeDirective reports whether a trimmed, comment-free line is the mode
// directive, and its value. "mode:443" (no space, a port after the colon)
// is an entry instead.
func modeDirective(line string) (value string, ok bool) {
	key, value, found := strings.Cut(line, ":")
	if !found || !strings.EqualFold(strings.TrimSpace(key), "mode") {
		return "", false
	}
	if value != "" && strings.Trim(value, "0123456789-") == "" && !strings.ContainsFunc(line, unicode.IsSpace) {
		return "", false
	}
	return strings.TrimSpace(value), true
}

// MarshalFile renders p in the file form: a header comment, "mode: X",
// then one canonical entry per line. ParseFile of the result equals p.
// A nil p renders as DenyAll.
func (p *Policy) MarshalFile() []byte {
	if p == nil {
		p = DenyAll()
	}
	var b bytes.Buffer
	b.WriteString(fileHeader)
	b.WriteString("mode: " + string(p.Mode) + "\n")
	for _, e := range p.Entries {
		b.WriteString(e.String() + "\n")
	}
	for _, l := range p.ruleSetLines() {
		b.WriteString(l + "\n")
	}
	for i := range p.Inspect {
		for _, l := range p.Inspect[i].Lines() {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}

// LoadFile reads and parses a policy file. Errors name the path (and, for
// invalid content, the line: "/etc/doorman/x.policy:4: ...").
func LoadFile(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("policy file: %w", err)
	}
	return parseFile(path+":", data)
}

// EncodeFile returns p in the file form (MarshalFile), refusing a nil
// policy and one that would not read back equal (an invalid mode or entry
// built by hand): what a writer of policy files must check first.
func EncodeFile(p *Policy) ([]byte, error) {
	if p == nil {
		return nil, errors.New("refusing to write a nil policy")
	}
	data := p.MarshalFile()
	if q, err := ParseFile(data); err != nil || !q.Equal(p) {
		return nil, fmt.Errorf("refusing to write a policy that does not read back: %v", err)
	}
	return data, nil
}

// WriteFileAtomic writes p to path in the file form so that readers see
// the old file or the new one, never a part: it writes a temporary file in
// the same directory, syncs it, renames it over path, and syncs the
// directory. An existing file's permissions are kept; a new file gets
// 0644. A policy that would not read back equal (an invalid mode or entry
// built by hand) is refused and nothing is written.
func WriteFileAtomic(path string, p *Policy) (err error) {
	data, err := EncodeFile(p)
	if err != nil {
		return fmt.Errorf("policy file %s: %w", path, err)
	}
	perm := fs.FileMode(0o644)
	if fi, serr := os.Stat(path); serr == nil {
		perm = fi.Mode().Perm()
	}
	if err := atomicfile.Write(path, bytes.NewReader(data), atomicfile.Options{Perm: perm, Durable: true}); err != nil {
		return fmt.Errorf("policy file %s: %w", path, err)
	}
	return nil
}
