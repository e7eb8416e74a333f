package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/doorman-net/doorman/proxy"
)

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

func runProxy(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doorman proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		sandbox      = fs.String("sandbox", "", "sandbox id, for logs and 403 pages (required)")
		policyFile   = fs.String("policy", "", "policy file in the plain allowlist form, watched for changes (required)")
		resolver     = fs.String("resolver", "", "DNS server (addr:port) for names admitted by name rules; default: /etc/resolv.conf")
		logDest      = fs.String("log", "-", "where decision lines go: a file (appended) or - for stderr")
		sniffTimeout = fs.Duration("sniff-timeout", 10*time.Second, "how long to wait for the first bytes that carry a name")
		drain        = fs.Duration("drain-timeout", 10*time.Second, "on SIGTERM, how long open connections may finish before they are closed")
		readyFD      = fs.Int("ready-fd", -1, "file descriptor to write \"ready\\n\" to (then close) once serving")
		listenFDs    listFlag
		listenAddrs  listFlag
	)
	fs.Var(&listenFDs, "listen-fd", "inherited listening TCP socket `fd` (repeatable)")
	fs.Var(&listenAddrs, "listen", "TCP `address` to bind and serve (repeatable; for tests)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "doorman proxy: "+format+"\n", a...)
		return 1
	}
	if *sandbox == "" || *policyFile == "" {
		return fail("--sandbox and --policy are required")
	}
	if len(listenFDs) == 0 && len(listenAddrs) == 0 {
		return fail("no listener: give --listen-fd or --listen")
	}

	logOut := stderr
	if *logDest != "-" {
		f, err := os.OpenFile(*logDest, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			return fail("decision log: %v", err)
		}
		defer f.Close()
		logOut = f
	}
	logger := slog.New(slog.NewJSONHandler(logOut, nil))

	var listeners []net.Listener
	closeAll := func() {
		for _, ln := range listeners {
			ln.Close()
		}
	}
	for _, s := range listenFDs {
		fd, err := strconv.Atoi(s)
		if err != nil || fd < 3 {
			closeAll()
			return fail("--listen-fd %q: not a file descriptor number above 2", s)
		}
		f := os.NewFile(uintptr(fd), "listener-"+s)
		ln, err := net.FileListener(f)
		f.Close()
		if err != nil {
			closeAll()
			return fail("--listen-fd %d: %v", fd, err)
		}
		if _, ok := ln.(*net.TCPListener); !ok {
			ln.Close()
			closeAll()
			return fail("--listen-fd %d: not a TCP listening socket", fd)
		}
		listeners = append(listeners, ln)
	}
	for _, a := range listenAddrs {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			closeAll()
			return fail("--listen %s: %v", a, err)
		}
		listeners = append(listeners, ln)
	}

	cfg := proxy.Config{Sandbox: *sandbox, SniffTimeout: *sniffTimeout, Logger: logger}
	if *resolver != "" {
		if _, _, err := net.SplitHostPort(*resolver); err != nil {
			closeAll()
			return fail("--resolver %q: want addr:port: %v", *resolver, err)
		}
		cfg.Resolver = proxy.NewResolver(*resolver)
	}
	p := proxy.New(cfg)
	// A policy that does not load leaves the proxy serving in deny-all:
	// connections are refused visibly, never let through.
	watcher, err := proxy.NewPolicyWatcher(p, *policyFile, logger)
	if err != nil {
		fmt.Fprintf(stderr, "doorman proxy: %v (denying everything until it is fixed)\n", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go watcher.Run(ctx)

	var wg sync.WaitGroup
	for _, ln := range listeners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.Serve(ln)
		}()
	}
	if *readyFD >= 0 {
		f := os.NewFile(uintptr(*readyFD), "ready")
		f.Write([]byte("ready\n"))
		f.Close()
	}

	<-ctx.Done()
	dctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	p.Shutdown(dctx)
	wg.Wait()
	return 0
}
