// Package docs_test holds the README and docs/*.md to the code, so that the
// docs cannot drift from it: every doorman command and flag they show is one
// the binary has (read from its own --help), every configuration block
// parses with the parser the front door uses (strict: an unknown key fails),
// every doorman.io/ annotation, make target, DOORMAN_ variable, repository
// path and link they name exists.
//
// A fenced block says what it is by its language (sh: commands; json: a
// conflist when it has cniVersion and plugins) or by a marker on the line
// before it, an HTML comment that Markdown does not show:
//
//	<!-- doccheck: KIND [invalid] -->
//
// KIND is one of the kinds in blockCheckers, or "output" (what a program
// prints) or "skip REASON". "invalid" says that the block is an example of
// bad input: it must fail its parser. A block the test cannot classify
// fails it, so that no block goes unchecked by accident. A table whose first
// column names keys carries <!-- doccheck: keys KIND [col=N] --> on the line
// before it.
//
// It needs no root: it builds the doorman binary and runs only its --help.
package docs_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/doorman-net/doorman/annotation"
	"github.com/doorman-net/doorman/cniinstall"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hook"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/internal/strictjson"
	"github.com/doorman-net/doorman/plugin"
)

// root is the repository, seen from this package's directory.
const root = ".."

// pendingFiles are pages that README links to and another branch writes;
// a link to one is reported, not failed, until it exists.
var pendingFiles = []string{}

// externalFlags are the flags of other programs that the docs name in
// running text (a flag in a command line is judged by its program).
var externalFlags = map[string]string{
	"--network":    "docker, podman, nerdctl",
	"--annotation": "docker, podman, nerdctl",
	"--label":      "docker, nerdctl",
	"--runtime":    "nerdctl",
	"--dns":        "docker, podman",
	"--cni-path":   "nerdctl",
	"--cap-add":    "docker",
	"--platform":   "runsc",
	// The runc wrapper's own argument, which daemon.json's runtimeArgs
	// pass it (doorman-runtime's other arguments are runc's).
	"--doorman-runtime": "doorman-runtime",
	"--once":            "", // filled in: install-cni's
}

// otherDoormanNames are doorman.io/ names that are not annotations (an API
// group and version); each counts only while a CRD in deploy/kubernetes
// serves it.
var otherDoormanNames = []string{"doorman.io/v1alpha1"}

// programs whose command lines the docs show and the test leaves alone.
var programs = []string{
	"podman", "docker", "nerdctl", "ctr", "crictl", "kubectl", "curl", "tail", "cat", "grep",
	"cnitool", "apt-get", "runc", "ip", "nft", "sed", "jq", "head", "openssl", "python3", "node",
	"npm", "git", "ls", "rm", "perf", "sysctl", "uptime", "mitmdump", "squid", "haproxy", "echo",
	"time", "taskset", "bin/doorman-demo", "doorman-runtime", ".ci/run", ".ci/build-cluster",
}

// block is one fenced code block.
type block struct {
	file    string
	line    int
	lang    string
	kind    string
	invalid bool
	text    string
}

// span is one inline code span, with the line it starts on.
type span struct {
	file string
	line int
	text string
}

// link is one Markdown link.
type link struct {
	file, target string
	line         int
}

// page is one Markdown file, taken apart.
type page struct {
	name    string
	text    string
	blocks  []block
	spans   []span
	links   []link
	anchors map[string]bool
	tables  []table
	skipped int // paragraphs a skip marker exempts
}

// table is a Markdown table that a keys marker precedes.
type table struct {
	file string
	line int
	kind string
	col  int
	rows [][]string
}

var (
	markerRe       = regexp.MustCompile(`^\s*<!--\s*doccheck:\s*(.*?)\s*-->\s*$`)
	spanRe         = regexp.MustCompile("`([^`]+)`")
	linkRe         = regexp.MustCompile(`\[([^\]]*)\]\(([^)\s]+)\)`)
	headingRe      = regexp.MustCompile(`^(#{1,6})\s+(.*?)\s*#*\s*$`)
	flagRe         = regexp.MustCompile(`^[\[(]*(--?[a-zA-Z][a-zA-Z0-9-]*)`)
	annoRe         = regexp.MustCompile(`doorman\.io/[a-z0-9][a-z0-9.-]*`)
	envRe          = regexp.MustCompile(`\bDOORMAN_[A-Z0-9_]+`)
	leadingSpansRe = regexp.MustCompile("^(\\s*`[^`]+`\\s*,?)+")
	pathRe         = regexp.MustCompile(`^\.?[a-z][a-z0-9_.-]*/[A-Za-z0-9_./*-]*$`)
)

// anchor is the id GitHub gives a heading.
func anchor(title string) string {
	t := strings.ToLower(strings.TrimSpace(title))
	var b strings.Builder
	for _, r := range t {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r > 127:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// parsePage takes a Markdown file apart into its blocks, inline code spans,
// links, headings and marked tables.
func parsePage(name, text string) (*page, error) {
	p := &page{name: name, text: text, anchors: map[string]bool{}}
	lines := strings.Split(text, "\n")
	var para []string
	paraStart := 0
	var marker func(i int) string
	flush := func() {
		if len(para) == 0 {
			return
		}
		joined := strings.Join(para, "\n")
		if m := strings.Fields(marker(paraStart - 1)); len(m) > 0 && m[0] == "skip" {
			// A paragraph that names what is not there on purpose
			// (a flag tried and dropped, one not built yet).
			p.skipped++
			para = nil
			return
		}
		for _, m := range spanRe.FindAllStringSubmatchIndex(joined, -1) {
			line := paraStart + strings.Count(joined[:m[0]], "\n")
			p.spans = append(p.spans, span{name, line, strings.ReplaceAll(joined[m[2]:m[3]], `\|`, "|")})
		}
		noCode := spanRe.ReplaceAllString(joined, "``")
		for _, m := range linkRe.FindAllStringSubmatchIndex(noCode, -1) {
			line := paraStart + strings.Count(noCode[:m[0]], "\n")
			p.links = append(p.links, link{name, noCode[m[4]:m[5]], line})
		}
		para = nil
	}
	marker = func(i int) string {
		for j := i - 1; j >= 0; j-- {
			if strings.TrimSpace(lines[j]) == "" {
				continue
			}
			if m := markerRe.FindStringSubmatch(lines[j]); m != nil {
				return m[1]
			}
			return ""
		}
		return ""
	}
	seen := map[string]int{}
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		trimmed := strings.TrimLeft(l, " ")
		switch {
		case strings.HasPrefix(trimmed, "```"):
			flush()
			indent := len(l) - len(trimmed)
			b := block{file: name, line: i + 1, lang: strings.TrimSpace(trimmed[3:])}
			m := strings.Fields(marker(i))
			if len(m) > 0 {
				b.kind = m[0]
				b.invalid = slices.Contains(m[1:], "invalid")
			}
			var body []string
			j := i + 1
			for ; j < len(lines) && !strings.HasPrefix(strings.TrimLeft(lines[j], " "), "```"); j++ {
				bl := lines[j]
				if len(bl) >= indent && strings.TrimSpace(bl[:indent]) == "" {
					bl = bl[indent:]
				}
				body = append(body, bl)
			}
			if j == len(lines) {
				return nil, fmt.Errorf("%s:%d: a code block that never closes", name, i+1)
			}
			b.text = strings.Join(body, "\n")
			p.blocks = append(p.blocks, b)
			i = j
		case headingRe.MatchString(l):
			flush()
			a := anchor(headingRe.FindStringSubmatch(l)[2])
			if n := seen[a]; n > 0 {
				p.anchors[fmt.Sprintf("%s-%d", a, n)] = true
			} else {
				p.anchors[a] = true
			}
			seen[a]++
		case strings.TrimSpace(l) == "" || markerRe.MatchString(l):
			flush()
		case strings.HasPrefix(trimmed, "|") && (len(para) == 0 || !strings.HasPrefix(strings.TrimLeft(para[len(para)-1], " "), "|")):
			// A table starts: a keys marker before it says what its
			// first column names.
			flush()
			if m := strings.Fields(marker(i)); len(m) >= 2 && m[0] == "keys" {
				t := table{file: name, line: i + 1, kind: m[1], col: 1}
				for _, o := range m[2:] {
					if _, err := fmt.Sscanf(o, "col=%d", &t.col); err != nil {
						return nil, fmt.Errorf("%s:%d: keys marker: %q: want col=N", name, i, o)
					}
				}
				for j := i; j < len(lines) && strings.HasPrefix(strings.TrimSpace(lines[j]), "|"); j++ {
					if j > i+1 { // past the header and its rule
						t.rows = append(t.rows, splitRow(lines[j]))
					}
				}
				p.tables = append(p.tables, t)
			}
			paraStart = i + 1
			para = append(para, l)
		default:
			if len(para) == 0 {
				paraStart = i + 1
			}
			para = append(para, l)
		}
	}
	flush()
	return p, nil
}

// splitRow splits a table row into its cells (an escaped \| stays in its
// cell).
func splitRow(l string) []string {
	l = strings.TrimSpace(l)
	l = strings.TrimPrefix(strings.TrimSuffix(l, "|"), "|")
	l = strings.ReplaceAll(l, `\|`, "\x00")
	var cells []string
	for _, c := range strings.Split(l, "|") {
		cells = append(cells, strings.TrimSpace(strings.ReplaceAll(c, "\x00", "|")))
	}
	return cells
}

// cli is what the doorman binary says of itself.
type cli struct {
	flags      map[string]map[string]bool // subcommand: its flags, without dashes
	allFlag    map[string]bool
	agentFlags map[string]bool // doorman-agent's, without dashes
}

// readCLI builds the binaries and reads doorman's subcommands and their
// flags, and doorman-agent's flags, from their --help.
func readCLI(t *testing.T) *cli {
	t.Helper()
	dir := t.TempDir()
	bin, agentBin := filepath.Join(dir, "doorman"), filepath.Join(dir, "doorman-agent")
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/doorman", "./cmd/doorman-agent")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/doorman ./cmd/doorman-agent: %v\n%s", err, out)
	}
	help := func(args ...string) string {
		out, _ := exec.Command(bin, args...).CombinedOutput() // --help exits 0 or 2
		return string(out)
	}
	c := &cli{flags: map[string]map[string]bool{}, allFlag: map[string]bool{}}
	top := help("--help")
	_, list, ok := strings.Cut(top, "\nCommands:\n")
	if !ok {
		t.Fatalf("doorman --help lists no commands:\n%s", top)
	}
	cmdRe := regexp.MustCompile(`(?m)^  ([a-z][a-z0-9-]*)\s`)
	optRe := regexp.MustCompile(`(?m)^\s+-([a-zA-Z0-9][a-zA-Z0-9-]*)`)
	for _, m := range cmdRe.FindAllStringSubmatch(list, -1) {
		sub := m[1]
		// Go's flag package answers -h and --help for every flag set.
		c.flags[sub] = map[string]bool{"h": true, "help": true}
		c.allFlag["h"], c.allFlag["help"] = true, true
		if sub == "runtime" {
			continue // the runc wrapper: --help is runc's
		}
		for _, f := range optRe.FindAllStringSubmatch(help(sub, "--help"), -1) {
			c.flags[sub][f[1]] = true
			c.allFlag[f[1]] = true
		}
	}
	if len(c.flags) < 10 || len(c.allFlag) < 20 {
		t.Fatalf("read %d subcommands and %d flags from doorman's --help: too few, the parsing is broken", len(c.flags), len(c.allFlag))
	}
	c.agentFlags = map[string]bool{"h": true, "help": true}
	out, _ := exec.Command(agentBin, "--help").CombinedOutput() // exits 0 or 2
	for _, f := range optRe.FindAllStringSubmatch(string(out), -1) {
		c.agentFlags[f[1]] = true
	}
	if len(c.agentFlags) < 4 {
		t.Fatalf("read %d flags from doorman-agent's --help: too few, the parsing is broken:\n%s", len(c.agentFlags), out)
	}
	return c
}

// repo is what the test knows of the repository besides the binary.
type repo struct {
	targets  map[string]bool // the Makefile's
	vars     map[string]bool // the Makefile's variables
	sources  string          // every Go file, the Makefile and .ci, for DOORMAN_ variables
	topDirs  map[string]bool // top-level directories, for paths
	funcs    map[string][]string
	anchors  map[string]map[string]bool // page: anchors
	annoKeys []string
}

func readRepo(t *testing.T) *repo {
	t.Helper()
	r := &repo{targets: map[string]bool{}, vars: map[string]bool{}, topDirs: map[string]bool{},
		funcs: map[string][]string{}, anchors: map[string]map[string]bool{}}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mk), "\n") {
		if m := regexp.MustCompile(`^([A-Za-z0-9_.-]+)\s*(\?|:)?=`).FindStringSubmatch(l); m != nil {
			r.vars[m[1]] = true
		} else if m := regexp.MustCompile(`^([a-z][a-z0-9_.-]*)\s*:`).FindStringSubmatch(l); m != nil {
			r.targets[m[1]] = true
		}
	}
	var src strings.Builder
	src.Write(mk)
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "bin" || d.Name() == "node_modules" || d.Name() == ".git" || path == filepath.Join(root, "docs")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".go") || strings.Contains(path, "/.ci/")) {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			src.Write(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r.sources = src.String()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() && e.Name() != "bin" && e.Name() != ".git" {
			r.topDirs[e.Name()] = true
		}
	}
	r.annoKeys = append(slices.Clone(annotation.Keys), hook.AnnotationInspect)
	crds, err := filepath.Glob(filepath.Join(root, "deploy", "kubernetes", "crd-*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range otherDoormanNames {
		group, version, _ := strings.Cut(n, "/")
		for _, f := range crds {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Contains(string(b), "group: "+group+"\n") && strings.Contains(string(b), "- name: "+version+"\n") {
				r.annoKeys = append(r.annoKeys, n)
				break
			}
		}
	}
	return r
}

// testFuncs lists the Test and Benchmark functions of a package directory.
func (r *repo) testFuncs(dir string) []string {
	if fs, ok := r.funcs[dir]; ok {
		return fs
	}
	var fs []string
	files, _ := filepath.Glob(filepath.Join(root, dir, "*_test.go"))
	re := regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Za-z0-9_]*)\(`)
	for _, f := range files {
		b, _ := os.ReadFile(f)
		for _, m := range re.FindAllStringSubmatch(string(b), -1) {
			fs = append(fs, m[1])
		}
	}
	r.funcs[dir] = fs
	return fs
}

// checker gathers the failures and counts what was checked.
type checker struct {
	t      *testing.T
	cli    *cli
	repo   *repo
	errs   []string
	counts map[string]int
	// lastDoorman is the subcommand of the last doorman segment of a line,
	// for alternatives after a |.
	lastDoorman []string
}

func (c *checker) fail(file string, line int, format string, a ...any) {
	c.errs = append(c.errs, fmt.Sprintf("%s:%d: %s", file, line, fmt.Sprintf(format, a...)))
}

// tokens splits a command line into words, keeping quoted strings whole.
func tokens(s string) []string {
	var out []string
	var cur strings.Builder
	var quote rune
	in := false
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, in = r, true
		case r == ' ' || r == '\t':
			if in {
				out = append(out, cur.String())
				cur.Reset()
				in = false
			}
		default:
			cur.WriteRune(r)
			in = true
		}
	}
	if in {
		out = append(out, cur.String())
	}
	return out
}

// segments splits a command line at &&, ||, ; and | outside quotes.
func segments(s string) []string {
	var out []string
	var quote rune
	start := 0
	for i := 0; i < len(s); i++ {
		ch := rune(s[i])
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == ';' || ch == '|' || ch == '&' && i+1 < len(s) && s[i+1] == '&':
			out = append(out, s[start:i])
			if i+1 < len(s) && (s[i+1] == '|' || s[i+1] == '&') {
				i++
			}
			start = i + 1
		}
	}
	return append(out, s[start:])
}

// stripComment cuts a shell comment off a line.
func stripComment(s string) string {
	var quote rune
	for i, ch := range s {
		switch {
		case quote != 0:
			if ch == quote {
				quote = 0
			}
		case ch == '\'' || ch == '"':
			quote = ch
		case ch == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return s[:i]
		}
	}
	return s
}

var doubleSpace = regexp.MustCompile(`\S(\s{2,})\S`)

// commandLines joins continued lines and cuts comments; synopsis lines
// (usage blocks, inline code) also lose the description after two spaces.
func commandLines(text string, synopsis bool) []string {
	var out []string
	var cur string
	for _, l := range strings.Split(text, "\n") {
		l = strings.TrimSpace(stripComment(l))
		if strings.HasSuffix(l, `\`) {
			cur += strings.TrimSuffix(l, `\`) + " "
			continue
		}
		l = cur + l
		cur = ""
		if synopsis {
			if m := doubleSpace.FindStringSubmatchIndex(l); m != nil {
				l = l[:m[2]]
			}
		}
		out = append(out, strings.TrimSpace(strings.TrimPrefix(l, "$ ")))
	}
	return out
}

// checkLine checks each doorman, make and go command on one line.
func (c *checker) checkLine(file string, line int, l string) {
	c.lastDoorman = nil
	for _, seg := range segments(l) {
		c.checkSegment(file, line, tokens(strings.TrimSpace(seg)))
	}
}

func (c *checker) checkSegment(file string, line int, tok []string) {
	for len(tok) > 0 && (regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(tok[0]) || tok[0] == "sudo") {
		tok = tok[1:]
	}
	if len(tok) == 0 {
		return
	}
	switch prog := tok[0]; {
	case prog == "doorman" || prog == "bin/doorman" || prog == "/opt/cni/bin/doorman" || prog == "/usr/local/bin/doorman":
		c.counts["doorman commands"]++
		if len(tok) < 2 {
			return
		}
		var subs []string
		for _, s := range strings.Split(strings.Trim(tok[1], "[]()"), "|") {
			if _, ok := c.cli.flags[s]; !ok {
				c.fail(file, line, "doorman %s: no such subcommand (doorman --help lists %s)", s, strings.Join(sortedKeys(c.cli.flags), ", "))
				return
			}
			subs = append(subs, s)
		}
		c.lastDoorman = subs
		c.checkFlags(file, line, subs, tok[2:])
	case prog == "doorman-agent" || prog == "bin/doorman-agent" || prog == "/doorman-agent":
		c.counts["doorman-agent commands"]++
		for _, a := range tok[1:] {
			m := flagRe.FindStringSubmatch(a)
			if m == nil {
				c.checkPath(file, line, a)
				continue
			}
			c.counts["doorman-agent flags"]++
			if name := strings.TrimLeft(m[1], "-"); !c.cli.agentFlags[name] {
				c.fail(file, line, "doorman-agent %s: no such flag (doorman-agent --help lists %s)", m[1], strings.Join(sortedKeys(c.cli.agentFlags), ", "))
			}
		}
	case prog == "make":
		for _, a := range tok[1:] {
			if strings.HasPrefix(a, "-") {
				continue
			}
			c.counts["make targets"]++
			if k, _, ok := strings.Cut(a, "="); ok {
				if !c.repo.vars[k] {
					c.fail(file, line, "make %s: the Makefile has no variable %s", a, k)
				}
			} else if !c.repo.targets[a] {
				c.fail(file, line, "make %s: the Makefile has no such target", a)
			}
		}
	case prog == "go" && len(tok) > 1 && (tok[1] == "test" || tok[1] == "build" || tok[1] == "run"):
		c.checkGo(file, line, tok[1:])
	case strings.HasPrefix(prog, "-") || strings.HasPrefix(prog, "[") || strings.HasPrefix(prog, "("):
		// An alternative after a |: the flags of the doorman command
		// before it.
		if c.lastDoorman != nil {
			c.checkFlags(file, line, c.lastDoorman, tok)
		}
	default:
		for _, a := range tok[1:] {
			c.checkPath(file, line, a)
		}
	}
}

// sortedKeys lists a map's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	return slices.Sorted(maps.Keys(m))
}

// checkFlags checks every flag among args against each subcommand.
func (c *checker) checkFlags(file string, line int, subs, args []string) {
	for _, a := range args {
		if a == "--" {
			return // the command doorman run runs
		}
		m := flagRe.FindStringSubmatch(a)
		if m == nil {
			c.checkPath(file, line, a)
			continue
		}
		name := strings.TrimLeft(m[1], "-")
		for _, s := range subs {
			if s == "runtime" {
				continue // runc's flags
			}
			c.counts["doorman flags"]++
			if !c.cli.flags[s][name] {
				c.fail(file, line, "doorman %s %s: no such flag (doorman %s --help lists %s)", s, m[1], s, strings.Join(sortedKeys(c.cli.flags[s]), ", "))
			}
		}
	}
}

// checkGo checks the package directories and the -run and -bench patterns
// of a go test command.
func (c *checker) checkGo(file string, line int, args []string) {
	var pkgs, patterns []string
	for i := 1; i < len(args); i++ {
		a := args[i]
		name, val, hasVal := strings.Cut(a, "=")
		if (name == "-run" || name == "-bench") && !hasVal && i+1 < len(args) {
			val, hasVal = args[i+1], true
			i++
		}
		switch {
		case name == "-run" || name == "-bench":
			if hasVal && val != "^$" && val != "." {
				patterns = append(patterns, val)
			}
		case strings.HasPrefix(a, "./") || strings.HasPrefix(a, "github.com/doorman-net/doorman/"):
			p := strings.TrimPrefix(strings.TrimPrefix(a, "github.com/doorman-net/doorman/"), "./")
			p = strings.TrimSuffix(strings.TrimSuffix(p, "..."), "/")
			c.counts["go packages"]++
			if st, err := os.Stat(filepath.Join(root, p)); err != nil || !st.IsDir() {
				c.fail(file, line, "go %s: no package directory %s", args[0], a)
				continue
			}
			pkgs = append(pkgs, p)
		}
	}
	if args[0] != "test" || len(pkgs) == 0 || strings.HasSuffix(strings.Join(pkgs, " "), "...") {
		return
	}
	for _, pat := range patterns {
		top, _, _ := strings.Cut(pat, "/")
		re, err := regexp.Compile(top)
		if err != nil {
			c.fail(file, line, "go test pattern %q: %v", pat, err)
			continue
		}
		c.counts["go test patterns"]++
		found := false
		for _, p := range pkgs {
			for _, f := range c.repo.testFuncs(p) {
				if re.MatchString(f) {
					found = true
				}
			}
		}
		if !found {
			c.fail(file, line, "go test pattern %q matches no test, benchmark or fuzz function in %s", pat, strings.Join(pkgs, ", "))
		}
	}
}

// checkPath checks that a word that looks like a path in the repository
// (its first element a top-level directory) names a file or directory.
func (c *checker) checkPath(file string, line int, w string) {
	w = strings.TrimRight(w, ".,;:)")
	if !pathRe.MatchString(w) || strings.Contains(w, "...") {
		return
	}
	first, _, _ := strings.Cut(w, "/")
	if !c.repo.topDirs[first] {
		return
	}
	c.counts["repository paths"]++
	ms, _ := filepath.Glob(filepath.Join(root, strings.TrimSuffix(w, "/")))
	if len(ms) == 0 {
		c.fail(file, line, "%s: no such file or directory in the repository", w)
	}
}

// blockCheckers parse a block of their kind; they return the parser's
// error, which an invalid block must have.
var blockCheckers = map[string]func(c *checker, b block) error{
	"policy": func(c *checker, b block) error {
		_, err := conf.ParseFile([]byte(b.text))
		return err
	},
	"conflist": func(c *checker, b block) error {
		list, err := libcni.ConfListFromBytes([]byte(b.text))
		if err != nil {
			return err
		}
		n := 0
		for _, p := range list.Plugins {
			if p.Network.Type != "doorman" {
				continue
			}
			n++
			if _, err := plugin.ParseEntry(p.Bytes); err != nil {
				return fmt.Errorf("doorman's entry: %w", err)
			}
			if _, err := cniinstall.ValidateEntry(p.Bytes); err != nil {
				return fmt.Errorf("doorman's entry (installer): %w", err)
			}
		}
		if n == 0 {
			return errors.New("no doorman entry in the conflist")
		}
		return nil
	},
	"cni-entry": func(c *checker, b block) error {
		_, err := plugin.ParseEntry([]byte(b.text))
		return err
	},
	"install-cni.json": func(c *checker, b block) error {
		_, err := cniinstall.ValidateConfig([]byte(b.text))
		return err
	},
	"runtime.json": func(c *checker, b block) error {
		path := filepath.Join(c.t.TempDir(), "runtime.json")
		if err := os.WriteFile(path, []byte(b.text), 0o600); err != nil {
			return err
		}
		_, err := hook.LoadRuntimeConfig(path)
		return err
	},
	"limits.json": func(c *checker, b block) error {
		path := filepath.Join(c.t.TempDir(), "limits.json")
		if err := os.WriteFile(path, []byte(b.text), 0o600); err != nil {
			return err
		}
		_, err := hostconf.Limits(path)
		return err
	},
	"inspect-json": func(c *checker, b block) error {
		var v struct {
			Inspect json.RawMessage `json:"inspect"`
		}
		if err := strictjson.Decode("", []byte(b.text), &v); err != nil {
			return err
		}
		_, err := conf.ParseInspectJSON(v.Inspect)
		return err
	},
	"daemon.json": func(c *checker, b block) error {
		var v struct {
			Runtimes map[string]struct {
				Path        string   `json:"path"`
				RuntimeArgs []string `json:"runtimeArgs"`
			} `json:"runtimes"`
			DefaultRuntime string `json:"default-runtime"`
		}
		d := json.NewDecoder(strings.NewReader(b.text))
		d.DisallowUnknownFields()
		if err := d.Decode(&v); err != nil {
			return err
		}
		for name, r := range v.Runtimes {
			if filepath.Base(r.Path) != "doorman-runtime" {
				return fmt.Errorf("runtime %s: path %s is not the doorman-runtime link make install makes", name, r.Path)
			}
		}
		if _, ok := v.Runtimes[v.DefaultRuntime]; v.DefaultRuntime != "" && !ok {
			return fmt.Errorf("default-runtime %q is none of the runtimes", v.DefaultRuntime)
		}
		return nil
	},
	"oci-hooks": func(c *checker, b block) error {
		var v map[string]map[string][]struct {
			Path string   `json:"path"`
			Args []string `json:"args"`
		}
		d := json.NewDecoder(strings.NewReader("{" + b.text + "}"))
		d.DisallowUnknownFields()
		if err := d.Decode(&v); err != nil {
			return err
		}
		for _, hs := range v["hooks"] {
			for _, h := range hs {
				before := len(c.errs)
				c.checkSegment(b.file, b.line, h.Args)
				if len(c.errs) > before {
					return errors.New("a hook's args are no doorman command")
				}
			}
		}
		return nil
	},
	"log": func(c *checker, b block) error {
		d := json.NewDecoder(strings.NewReader(b.text))
		n := 0
		for d.More() {
			var line map[string]any
			if err := d.Decode(&line); err != nil {
				return fmt.Errorf("log line %d: %w", n+1, err)
			}
			if _, ok := line["msg"]; !ok {
				return fmt.Errorf("log line %d has no msg", n+1)
			}
			n++
		}
		return nil
	},
	"annotations": func(c *checker, b block) error {
		m := map[string]string{}
		in := false
		for _, l := range strings.Split(b.text, "\n") {
			if strings.TrimSpace(l) == "annotations:" {
				in = true
				continue
			}
			if k, v, ok := strings.Cut(strings.TrimSpace(l), ": "); in && ok {
				m[k] = strings.Trim(v, `"'`)
			}
		}
		if len(m) == 0 {
			return errors.New("no annotations")
		}
		if err := annotation.CheckKnown(m, hook.AnnotationInspect); err != nil {
			return err
		}
		if _, _, err := annotation.Policy(m); err != nil {
			return err
		}
		_, err := annotation.Direct(m)
		return err
	},
}

// keySets are the keys a keys marker's table may name, by kind.
func keySets(t *testing.T) map[string][]string {
	limitsFile := filepath.Join(t.TempDir(), "limits.json")
	if err := os.WriteFile(limitsFile, []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	limits, err := hostconf.Limits(limitsFile)
	if err != nil {
		t.Fatal(err)
	}
	return map[string][]string{
		"cni-entry":        append(slices.Clone(plugin.Keys), plugin.CNIKeys...),
		"install-cni.json": strictjson.Keys(cniinstall.DefaultConfig()),
		"runtime.json":     strictjson.Keys(hook.RuntimeConfig{}),
		"limits.json":      strictjson.Keys(limits),
	}
}

func (c *checker) checkBlock(b block) {
	lang := strings.Fields(b.lang + " ")
	l := ""
	if len(lang) > 0 {
		l = lang[0]
	}
	kind := b.kind
	if kind == "" {
		switch {
		case l == "sh" || l == "bash" || l == "console" || l == "shell":
			kind = "sh"
		case l == "" && (strings.HasPrefix(strings.TrimSpace(b.text), "doorman ") || strings.HasPrefix(strings.TrimSpace(b.text), "doorman-agent ")):
			kind = "synopsis"
		case l == "json" && strings.Contains(b.text, `"cniVersion"`) && strings.Contains(b.text, `"plugins"`):
			kind = "conflist"
		}
	}
	c.counts["blocks"]++
	switch {
	case kind == "":
		c.fail(b.file, b.line, "a ```%s block the test cannot classify: mark it <!-- doccheck: KIND --> (KIND: sh, synopsis, %s, output or skip REASON)", b.lang, strings.Join(sortedKeys(blockCheckers), ", "))
		return
	case kind == "output":
		c.counts["output blocks (not checked)"]++
		return
	case kind == "skip":
		c.counts["skipped blocks"]++
		return
	case kind == "sh" || kind == "synopsis":
		c.counts["command blocks"]++
		for i, line := range commandLines(b.text, kind == "synopsis") {
			c.checkLine(b.file, b.line+1+i, line)
		}
	default:
		check, ok := blockCheckers[kind]
		if !ok {
			c.fail(b.file, b.line, "doccheck marker: unknown kind %q", kind)
			return
		}
		c.counts[kind+" blocks"]++
		err := check(c, b)
		switch {
		case b.invalid && err == nil:
			c.fail(b.file, b.line, "a %s block marked invalid parses", kind)
		case b.invalid:
			c.t.Logf("%s:%d: invalid %s block, as marked: %v", b.file, b.line, kind, err)
		case err != nil:
			c.fail(b.file, b.line, "%s block: %v", kind, err)
		}
	}
	if kind != "output" {
		c.checkNames(b.file, b.line, b.text)
	}
}

// checkNames checks the doorman.io/ annotations and DOORMAN_ variables
// named in text.
func (c *checker) checkNames(file string, line int, text string) {
	for _, a := range annoRe.FindAllString(text, -1) {
		a = strings.TrimRight(a, ".")
		c.counts["doorman.io annotations"]++
		if !slices.Contains(c.repo.annoKeys, a) {
			c.fail(file, line, "%s: doorman reads no such annotation (it reads %s)", a, strings.Join(c.repo.annoKeys, ", "))
		}
	}
	for _, v := range envRe.FindAllString(text, -1) {
		c.counts["DOORMAN_ variables"]++
		if strings.Count(c.repo.sources, v) == 0 {
			c.fail(file, line, "%s: no Go file, Makefile or .ci script uses it", v)
		}
	}
}

// checkSpan checks one inline code span.
func (c *checker) checkSpan(s span) {
	text := strings.Join(strings.Fields(s.text), " ")
	first, _, _ := strings.Cut(text, " ")
	switch {
	case first == "doorman" && strings.Contains(text, " "):
		c.counts["inline commands"]++
		// A span may break across lines: it is one command.
		c.checkLine(s.file, s.line, text)
	case first == "make" || first == "go" || first == "doorman-agent" && strings.Contains(text, " "):
		c.counts["inline commands"]++
		c.checkLine(s.file, s.line, text)
	case strings.HasPrefix(first, "--"):
		name := strings.TrimLeft(strings.SplitN(first, "=", 2)[0], "-")
		c.counts["inline flags"]++
		if !c.cli.allFlag[name] && !c.cli.agentFlags[name] {
			if _, ok := externalFlags["--"+name]; !ok {
				c.fail(s.file, s.line, "%s: no doorman subcommand has this flag (nor is it one of the other programs' flags the test knows)", first)
			}
		}
	default:
		c.checkPath(s.file, s.line, text)
	}
}

// checkLinks checks that relative links name files, and their anchors
// headings, that exist.
func (c *checker) checkLinks(p *page, pages map[string]*page) {
	for _, l := range p.links {
		if strings.Contains(l.target, "://") || strings.HasPrefix(l.target, "mailto:") {
			continue
		}
		c.counts["links"]++
		path, frag, _ := strings.Cut(l.target, "#")
		target := p.name
		if path != "" {
			target = filepath.Clean(filepath.Join(filepath.Dir(p.name), path))
		}
		if _, err := os.Stat(filepath.Join(root, target)); err != nil && target != p.name {
			if slices.Contains(pendingFiles, target) {
				c.t.Logf("%s:%d: link to %s, which another branch writes: not there yet", l.file, l.line, target)
				continue
			}
			c.fail(l.file, l.line, "link %s: no such file %s", l.target, target)
			continue
		}
		if frag == "" {
			continue
		}
		tp, ok := pages[target]
		if !ok && strings.HasSuffix(target, ".md") {
			b, err := os.ReadFile(filepath.Join(root, target))
			if err == nil {
				tp, err = parsePage(target, string(b))
			}
			if err != nil {
				c.fail(l.file, l.line, "link %s: %v", l.target, err)
				continue
			}
			pages[target] = tp
		} else if !ok {
			c.fail(l.file, l.line, "link %s: an anchor in a file that is no Markdown page", l.target)
			continue
		}
		if !tp.anchors[frag] {
			c.fail(l.file, l.line, "link %s: %s has no heading #%s", l.target, target, frag)
		}
	}
}

// checkTable checks that a marked table's key column names keys of its kind.
func (c *checker) checkTable(tb table, keys map[string][]string) {
	ks, ok := keys[tb.kind]
	if !ok {
		c.fail(tb.file, tb.line, "keys marker: unknown kind %q (want one of %s)", tb.kind, strings.Join(sortedKeys(keys), ", "))
		return
	}
	for i, row := range tb.rows {
		if tb.col > len(row) {
			c.fail(tb.file, tb.line+2+i, "row has no column %d", tb.col)
			continue
		}
		// The keys are the code spans the cell starts with, a comma
		// between them; what follows says more of them.
		lead := leadingSpansRe.FindString(row[tb.col-1])
		for _, m := range spanRe.FindAllStringSubmatch(lead, -1) {
			k, _, _ := strings.Cut(strings.Trim(m[1], `"`), ".")
			c.counts["configuration keys in tables"]++
			if !slices.Contains(ks, k) {
				c.fail(tb.file, tb.line+2+i, "%s: not a key of %s (its keys are %s)", m[1], tb.kind, strings.Join(ks, ", "))
			}
		}
	}
}

// docFiles are the pages the test reads: README.md and docs/*.md.
func docFiles(t *testing.T) []string {
	files := []string{"README.md"}
	ms, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		files = append(files, filepath.Join("docs", filepath.Base(m)))
	}
	return files
}

// checkDocs checks the named pages; it returns the failures and the counts.
func checkDocs(t *testing.T, files []string, read func(string) ([]byte, error), cl *cli, r *repo) ([]string, map[string]int) {
	c := &checker{t: t, cli: cl, repo: r, counts: map[string]int{}}
	externalFlags["--once"] = "install-cni"
	pages := map[string]*page{}
	for _, f := range files {
		b, err := read(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := parsePage(f, string(b))
		if err != nil {
			c.errs = append(c.errs, err.Error())
			continue
		}
		pages[f] = p
	}
	keys := keySets(t)
	for _, f := range files {
		p, ok := pages[f]
		if !ok {
			continue
		}
		for _, b := range p.blocks {
			c.checkBlock(b)
		}
		for _, s := range p.spans {
			c.checkSpan(s)
		}
		for _, tb := range p.tables {
			c.checkTable(tb, keys)
		}
		c.checkLinks(p, pages)
		c.counts["paragraphs skipped"] += p.skipped
		prose := p.text
		for _, b := range p.blocks {
			prose = strings.Replace(prose, b.text, "", 1)
		}
		for i, l := range strings.Split(prose, "\n") {
			c.checkNames(f, i+1, l)
		}
	}
	return c.errs, c.counts
}

// TestDocs checks README.md and docs/*.md against the code, and first
// that its checks catch what they look for.
func TestDocs(t *testing.T) {
	cl := readCLI(t)
	r := readRepo(t)
	t.Run("CatchDrift", func(t *testing.T) { testCatchDrift(t, cl, r) })
	t.Run("Pages", func(t *testing.T) {
		errs, counts := checkDocs(t, docFiles(t), func(f string) ([]byte, error) { return os.ReadFile(filepath.Join(root, f)) }, cl, r)
		for _, k := range sortedKeys(counts) {
			t.Logf("%-32s %d", k, counts[k])
		}
		for _, e := range errs {
			t.Error(e)
		}
	})
}

// testCatchDrift feeds the checks pages that are wrong in every way they
// look for, and wants each mistake found: a check that finds nothing would
// pass any page.
func testCatchDrift(t *testing.T, cl *cli, r *repo) {
	bad := map[string]string{
		"doorman lss":                      "```sh\ndoorman lss\n```\n",
		"doorman ls --bogus":               "```sh\ndoorman ls --bogus\n```\n",
		"synopsis flag":                    "```\ndoorman logs SANDBOX [--folow]   its decisions\n```\n",
		"inline flag of a subcommand":      "Run `doorman run --alow x -- true`.\n",
		"inline flag on a span's 2nd line": "Run `doorman run --allow x\n--alow y -- true`.\n",
		"inline flag alone":                "Pass `--no-such-flag`.\n",
		"make target":                      "```sh\nmake tests\n```\n",
		"make variable":                    "`make install CNI_DIR=/x`\n",
		"policy":                           "<!-- doccheck: policy -->\n```\nmode: allowlist\na*b.example.com\n```\n",
		"invalid policy that parses":       "<!-- doccheck: policy invalid -->\n```\napi.example.com\n```\n",
		"conflist unknown key":             "```json\n{\"cniVersion\": \"1.0.0\", \"name\": \"n\", \"plugins\": [{\"type\": \"doorman\", \"allowedHost\": []}]}\n```\n",
		"runtime.json unknown key":         "<!-- doccheck: runtime.json -->\n```json\n{\"stateDirectory\": \"/run/doorman\"}\n```\n",
		"annotation":                       "Set `doorman.io/allowed-host`.\n",
		"annotations block":                "<!-- doccheck: annotations -->\n```yaml\nmetadata:\n  annotations:\n    doorman.io/mode: permissive\n```\n",
		"unclassified block":               "```\nsomething\n```\n",
		"go test pattern":                  "```sh\ngo test -run '^$' -bench NoSuchBenchmark ./integration\n```\n",
		"go package":                       "```sh\ngo test ./nosuchpackage\n```\n",
		"repository path":                  "See `proxy/nosuchpackage`.\n",
		"link":                             "See [x](nosuchfile.md).\n",
		"anchor":                           "See [x](#no-such-heading).\n",
		"DOORMAN_ variable":                "Set `DOORMAN_NO_SUCH_VARIABLE=1`.\n",
		"keys table":                       "<!-- doccheck: keys cni-entry -->\n| key | meaning |\n|---|---|\n| `allowedHost` | x |\n",
		"oci hook args":                    "<!-- doccheck: oci-hooks -->\n```json\n\"hooks\": {\"poststop\": [{\"path\": \"/usr/local/bin/doorman\", \"args\": [\"doorman\", \"hooks\", \"poststop\"]}]}\n```\n",
		"inspect json":                     "<!-- doccheck: inspect-json -->\n```json\n{\"inspect\": {\"h.example\": {\"deny\": [{\"methd\": \"POST\"}]}}}\n```\n",
		"doorman alternative after a bar":  "```\ndoorman ca show [--pem] | [--nope]\n```\n",
		"doorman-agent flag":               "```sh\ndoorman-agent --node-nam n1\n```\n",
		"doorman-agent inline flag":        "Run `doorman-agent --metrics-address :1`.\n",
		"API version":                      "`apiVersion: doorman.io/v1beta9`\n",
	}
	for name, text := range bad {
		errs, _ := checkDocs(t, []string{"docs/x.md"}, func(string) ([]byte, error) { return []byte(text), nil }, cl, r)
		if len(errs) == 0 {
			t.Errorf("%s: a page with this mistake passed:\n%s", name, text)
		} else {
			t.Logf("%s: %s", name, errs[0])
		}
	}
	good := "<!-- doccheck: policy -->\n```\nmode: allowlist\napi.example.com\n```\n\n```sh\ndoorman ls -o json && make demo\n```\n\nSee [the run guide](run.md#usage) and `doorman.io/mode`.\n"
	if errs, _ := checkDocs(t, []string{"docs/x.md", "docs/run.md"}, func(f string) ([]byte, error) {
		if f == "docs/x.md" {
			return []byte(good), nil
		}
		return os.ReadFile(filepath.Join(root, f))
	}, cl, r); len(errs) > 0 {
		t.Errorf("a good page failed: %s", strings.Join(errs, "\n"))
	}
}
