package main

import (
	"io"
	"strings"

	"github.com/doorman-net/doorman/proxy/daemon"
	"github.com/doorman-net/doorman/proxy/supervise"
)

// runProxy is `doorman proxy --config FILE`: one sandbox's proxy, until
// SIGTERM (see package daemon and, for what it inherits, package launch).
func runProxy(args []string, stdout, stderr io.Writer) int { return daemon.Main(args, stderr) }

// runSupervise is `doorman supervise`: the parent of one sandbox's proxy,
// which holds its listeners and starts a new `doorman proxy` whenever the
// running one dies (see package supervise).
func runSupervise(args []string, stdout, stderr io.Writer) int { return supervise.Main(args, stderr) }

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }
