package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/sandbox"
)

// Exit statuses of the operator commands (ls, show, allow, deny, mode,
// set, logs, learn), so that scripts can tell failures apart.
const (
	exitOK        = 0
	exitFailed    = 1 // the operation failed: state, enforcement, I/O
	exitUsage     = 2 // bad flags or arguments, invalid entries or policy: nothing changed
	exitNoMatch   = 3 // no sandbox matches the name given
	exitAmbiguous = 4 // more than one sandbox matches it
)

// envStateDir overrides the default state directory for every operator
// command; --state-dir overrides both.
const envStateDir = "DOORMAN_STATE_DIR"

// exitCodes is the usage text's account of the exit statuses.
const exitCodes = `Exit status: 0 done, 1 failed, 2 bad usage or invalid input (nothing
changed), 3 no sandbox matches, 4 more than one sandbox matches.`

// sandboxArg is the usage text for how a SANDBOX argument is matched.
const sandboxArg = `SANDBOX is a container id or a unique prefix of one, a container name, a
Kubernetes pod as <namespace>/<pod name>, or the path of the sandbox's
network namespace.`

// cli is what the operator commands share: a flag set with --state-dir,
// the output streams, and how errors are reported.
type cli struct {
	name           string
	fs             *flag.FlagSet
	stateDir       string
	stdout, stderr io.Writer
}

// newCLI makes the flag set of `doorman name`; synopsis follows the name
// in the usage line and help is the text below it.
func newCLI(name, synopsis, help string, stdout, stderr io.Writer) *cli {
	c := &cli{name: name, stdout: stdout, stderr: stderr}
	c.fs = flag.NewFlagSet("doorman "+name, flag.ContinueOnError)
	c.fs.SetOutput(stderr)
	def := os.Getenv(envStateDir)
	if def == "" {
		def = hostconf.DefaultStateDir
	}
	c.fs.StringVar(&c.stateDir, "state-dir", def, "doorman's state `directory` (env "+envStateDir+")")
	c.fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: doorman %s %s\n\n%s\n\nFlags:\n", name, synopsis, strings.TrimSpace(help))
		c.fs.PrintDefaults()
		fmt.Fprintf(stderr, "\n%s\n", exitCodes)
	}
	return c
}

// outputFlag adds -o/--output text|json.
func (c *cli) outputFlag() *string {
	o := new(string)
	c.fs.StringVar(o, "o", "text", "output `format`: text or json")
	c.fs.StringVar(o, "output", "text", "same as -o")
	return o
}

// parse parses args, flags and positional arguments in any order ("--"
// ends the flags), and checks that there are at least min and, unless max
// is negative, at most max positional arguments. When it returns ok false,
// the command exits with code.
func (c *cli) parse(args []string, min, max int) (pos []string, code int, ok bool) {
	for {
		if err := c.fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, exitOK, false
			}
			return nil, exitUsage, false
		}
		rest := c.fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	switch {
	case len(pos) < min:
		fmt.Fprintf(c.stderr, "doorman %s: missing arguments\n", c.name)
	case max >= 0 && len(pos) > max:
		fmt.Fprintf(c.stderr, "doorman %s: unexpected arguments: %s\n", c.name, strings.Join(pos[max:], " "))
	default:
		return pos, exitOK, true
	}
	c.fs.Usage()
	return nil, exitUsage, false
}

// parseOutput is parse, then checks the -o value that parsing set in
// out.
func (c *cli) parseOutput(args []string, min, max int, out *string) ([]string, int, bool) {
	pos, code, ok := c.parse(args, min, max)
	if ok && !c.checkOutput(*out) {
		return nil, exitUsage, false
	}
	return pos, code, ok
}

// checkOutput validates an -o value.
func (c *cli) checkOutput(o string) bool {
	if o == "text" || o == "json" {
		return true
	}
	c.errorf("-o %q: want text or json", o)
	return false
}

// errorf reports an error on stderr as "doorman NAME: ...".
func (c *cli) errorf(format string, a ...any) {
	fmt.Fprintf(c.stderr, "doorman %s: %s\n", c.name, fmt.Sprintf(format, a...))
}

// notef tells the operator something worth knowing, on stderr.
func (c *cli) notef(format string, a ...any) {
	fmt.Fprintf(c.stderr, "note: %s\n", fmt.Sprintf(format, a...))
}

// fail reports err and returns exitFailed.
func (c *cli) fail(err error) int {
	c.errorf("%v", err)
	return exitFailed
}

// find looks up the one sandbox query names, reporting failures.
func (c *cli) find(query string) (*sandbox.State, int) {
	s, err := sandbox.Find(c.stateDir, query)
	if err == nil {
		return s, exitOK
	}
	c.errorf("%v", err)
	var amb *sandbox.AmbiguousError
	switch {
	case errors.As(err, new(*sandbox.NoMatchError)):
		return nil, exitNoMatch
	case errors.As(err, &amb):
		return nil, exitAmbiguous
	}
	return nil, exitFailed
}

// findEnforced is find for a command that needs what enforcement makes
// (a decision log): a sandbox recorded as not enforced is an error.
func (c *cli) findEnforced(query string) (*sandbox.State, int) {
	s, code := c.find(query)
	if s != nil && s.Unenforced != "" {
		c.errorf("doorman does not enforce sandbox %s (%s): it has no decision log", s.ID, s.Unenforced)
		return nil, exitFailed
	}
	return s, code
}

// writeJSON writes v indented, with a final newline.
func (c *cli) writeJSON(v any) int {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return c.fail(err)
	}
	return exitOK
}

// parseEntries parses every entry, reporting each invalid one; ok is false
// if any was.
func (c *cli) parseEntries(args []string) ([]conf.Entry, bool) {
	var out []conf.Entry
	ok := true
	for _, a := range args {
		e, err := conf.ParseEntry(a)
		if err != nil {
			c.errorf("invalid entry %v", err)
			ok = false
			continue
		}
		out = append(out, e)
	}
	return out, ok
}

// shortID shortens a container id for tables, as docker ps does, when it
// is the long hexadecimal kind engines generate, alone or after nerdctl's
// "<namespace>-" (default-3f4e1c2b9a8d). Any other id (a plain runc
// container's, chosen by whoever started it) is shown whole: a name's first
// 12 characters may be shared by several containers (build-worker-1,
// build-worker-2), and the table must tell them apart.
func shortID(id string) string {
	if ns, cid, ok := sandbox.SplitNamespacedID(id); ok {
		return ns + "-" + cid[:12]
	}
	if len(id) > 12 && strings.Trim(id, "0123456789abcdef") == "" {
		return id[:12]
	}
	return id
}

// plural renders "1 entry", "2 entries".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
