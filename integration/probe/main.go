// Command probe is the client doorman's container-runtime tests run inside
// real containers (Podman and the like), where neither curl nor the test
// binary is available: the image holds nothing but this static binary and
// the test CA. Each subcommand makes one connection and reports what
// happened through its output and, above all, its exit status, so a test can
// tell "allowed", "denied by a TLS alert", "refused" and "dropped" apart:
//
//	probe get URL [--ca FILE] [--resolve HOST:ADDR] [--data JSON] [--header NAME:VALUE]... [--timeout D] [--repeat N [--times]] [--every D [URL...]]
//	    HTTP(S) GET (with --data, a POST of that JSON body; each --header
//	    added to the request); prints "status: N" and the body. With
//	    --repeat, makes N more, each on a new connection, and prints their
//	    median and 90th percentile (with --times, every request's time
//	    too: the benchmarks). With --every, GETs each URL in turn
//	    every D, each on a new connection, forever, printing nothing (a
//	    pod whose requests a benchmark watches arrive at the servers).
//	probe tcp ADDR:PORT [--send DATA] [--timeout D]
//	    connects; with --send, writes DATA and waits for a reply.
//	probe udp ADDR:PORT [--send DATA] [--timeout D]
//	    sends one datagram and waits for an answer (an echo).
//	probe dns SERVER NAME [--timeout D]
//	    asks SERVER (UDP port 53 unless SERVER has a port) for NAME's A
//	    records; prints the rcode and the answers.
//	probe sleep D
//	    sleeps for D (keeps a container running for exec).
//
// Exit status:
//
//	0  a response came (HTTP response of any status, TCP connect or reply,
//	   UDP answer, DNS response)
//	1  any other error (unreachable network, bad certificate, a send the
//	   kernel refused with EPERM because a firewall rule rejects it…)
//	2  bad usage
//	3  the server (or doorman) sent a TLS alert, e.g. access_denied
//	4  the connection was refused, reset, or closed without an answer
//	5  nothing came back before the timeout
//
// It is built with CGO_ENABLED=0 so it runs in an otherwise empty rootfs; it
// resolves names with Go's own resolver, through the container's
// /etc/resolv.conf.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// Exit statuses; see the package comment.
const (
	exitOK        = 0
	exitOther     = 1
	exitUsage     = 2
	exitTLSAlert  = 3
	exitRefused   = 4
	exitTimedOut  = 5
	defaultWait   = 5 * time.Second
	maxBodyOutput = 64 << 10
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "get":
		err = runGet(args)
	case "tcp":
		err = runTCP(args)
	case "udp":
		err = runUDP(args)
	case "dns":
		err = runDNS(args)
	case "sleep":
		err = runSleep(args)
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "probe:", err)
		os.Exit(exitCode(err))
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: probe get URL [--ca FILE] [--resolve HOST:ADDR] [--data JSON] | tcp ADDR:PORT [--send DATA] | udp ADDR:PORT [--flood N] | dns SERVER NAME | sleep DURATION  [--timeout D]")
	os.Exit(exitUsage)
}

// usageError is bad input: exit status 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitCode classifies err into the statuses of the package comment.
func exitCode(err error) int {
	var ue usageError
	var op *net.OpError
	switch {
	case errors.As(err, &ue):
		return exitUsage
	case errors.As(err, &op) && op.Op == "remote error":
		// crypto/tls reports a received alert as an OpError "remote error".
		return exitTLSAlert
	case errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF),
		errors.Is(err, io.ErrUnexpectedEOF):
		return exitRefused
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), isTimeout(err):
		return exitTimedOut
	}
	return exitOther
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// parse parses args, which may mix flags and positional arguments, into fs
// and returns exactly want positional arguments.
func parse(fs *flag.FlagSet, args []string, want int, names string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, usageError{fmt.Sprintf("%s: %v", fs.Name(), err)}
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if want < 0 && len(pos) > 0 {
		return pos, nil
	}
	if len(pos) != want {
		return nil, usageError{fmt.Sprintf("%s: want %s, got %q", fs.Name(), names, pos)}
	}
	return pos, nil
}

func runGet(args []string) error {
	fs := flag.NewFlagSet("get", flag.ContinueOnError)
	caFile := fs.String("ca", "", "PEM file of the CA to trust (default: the system's)")
	resolve := fs.String("resolve", "", "HOST:ADDR: connect to ADDR whenever HOST is dialled")
	timeout := fs.Duration("timeout", defaultWait, "overall deadline")
	repeat := fs.Int("repeat", 0, "make the request this many more times, each on a new connection, and print their median and 90th percentile times (the benchmarks)")
	data := fs.String("data", "", "a JSON body to POST instead of a GET")
	printTimes := fs.Bool("times", false, "with --repeat: also print every request's time, in microseconds, in the order made")
	every := fs.Duration("every", 0, "repeat every D, forever, on new connections, silently")
	var headers headerFlags
	fs.Var(&headers, "header", "NAME:VALUE: a header of the request (repeatable)")
	want := 1
	if slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--every") || strings.HasPrefix(a, "-every") }) {
		want = -1
	}
	pos, err := parse(fs, args, want, "URL")
	if err != nil {
		return err
	}
	if *repeat > 0 && *data != "" {
		return usageError{"--repeat with --data: the repeated requests would have no body"}
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{}, Proxy: nil, DisableKeepAlives: *repeat > 0}
	if *caFile != "" {
		pem, err := os.ReadFile(*caFile)
		if err != nil {
			return fmt.Errorf("read --ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return usageError{fmt.Sprintf("--ca %s: no PEM certificate in it", *caFile)}
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	if *resolve != "" {
		host, addr, ok := strings.Cut(*resolve, ":")
		ip, err := netip.ParseAddr(addr)
		if !ok || err != nil {
			return usageError{fmt.Sprintf("--resolve %q: want HOST:ADDR with ADDR an IP address", *resolve)}
		}
		var d net.Dialer
		tr.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
			h, port, err := net.SplitHostPort(address)
			if err == nil && strings.EqualFold(h, host) {
				address = net.JoinHostPort(ip.String(), port)
			}
			return d.DialContext(ctx, network, address)
		}
	}
	if *every > 0 {
		tr.DisableKeepAlives = true
		for {
			for _, u := range pos {
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				if req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil); err == nil {
					if resp, err := (&http.Client{Transport: tr}).Do(req); err == nil {
						io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
					}
				}
				cancel()
			}
			time.Sleep(*every)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	method, reqBody := http.MethodGet, io.Reader(nil)
	if *data != "" {
		method, reqBody = http.MethodPost, strings.NewReader(*data)
	}
	req, err := http.NewRequestWithContext(ctx, method, pos[0], reqBody)
	if err != nil {
		return usageError{fmt.Sprintf("URL %q: %v", pos[0], err)}
	}
	if *data != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for _, h := range headers {
		req.Header.Add(h[0], h[1])
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyOutput))
	fmt.Printf("status: %d\n%s", resp.StatusCode, body)
	if err != nil || *repeat <= 0 {
		return err
	}
	times := make([]time.Duration, 0, *repeat)
	for range *repeat {
		start := time.Now()
		resp, err := (&http.Client{Transport: tr}).Do(req.Clone(ctx))
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		times = append(times, time.Since(start))
	}
	if *printTimes {
		us := make([]string, len(times))
		for i, d := range times {
			us[i] = strconv.FormatInt(d.Microseconds(), 10)
		}
		fmt.Printf("times_us: %s\n", strings.Join(us, " "))
	}
	slices.Sort(times)
	fmt.Printf("repeat: %d median_us %d p90_us %d\n", len(times), times[len(times)/2].Microseconds(), times[len(times)*9/10].Microseconds())
	return nil
}

// headerFlags are the --header NAME:VALUE flags of probe get.
type headerFlags [][2]string

func (h *headerFlags) String() string { return fmt.Sprint(*h) }

func (h *headerFlags) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("--header %q: want NAME:VALUE", v)
	}
	*h = append(*h, [2]string{strings.TrimSpace(name), strings.TrimSpace(value)})
	return nil
}

func runTCP(args []string) error {
	fs := flag.NewFlagSet("tcp", flag.ContinueOnError)
	send := fs.String("send", "", "data to write after connecting; then wait for a reply")
	timeout := fs.Duration("timeout", defaultWait, "deadline for connect and reply")
	pos, err := parse(fs, args, 1, "ADDR:PORT")
	if err != nil {
		return err
	}
	c, err := net.DialTimeout("tcp", pos[0], *timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Printf("connected: %s -> %s\n", c.LocalAddr(), c.RemoteAddr())
	if *send == "" {
		return nil
	}
	return sendAndRead(c, *send, *timeout)
}

func runUDP(args []string) error {
	fs := flag.NewFlagSet("udp", flag.ContinueOnError)
	send := fs.String("send", "doorman-probe", "the datagram to send")
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for an answer")
	flood := fs.Int("flood", 0, "send this many datagrams first, as fast as it can, without waiting for answers")
	pos, err := parse(fs, args, 1, "ADDR:PORT")
	if err != nil {
		return err
	}
	c, err := net.Dial("udp", pos[0])
	if err != nil {
		return err
	}
	defer c.Close()
	for range *flood {
		if _, err := io.WriteString(c, *send); err != nil {
			return err
		}
	}
	return sendAndRead(c, *send, *timeout)
}

// sendAndRead writes data to c and prints what comes back before timeout.
func sendAndRead(c net.Conn, data string, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	if _, err := io.WriteString(c, data); err != nil {
		return err
	}
	buf := make([]byte, 4096)
	n, err := c.Read(buf)
	if n > 0 {
		fmt.Printf("reply: %q\n", buf[:n])
		return nil
	}
	return err
}

func runDNS(args []string) error {
	fs := flag.NewFlagSet("dns", flag.ContinueOnError)
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer")
	pos, err := parse(fs, args, 2, "SERVER NAME")
	if err != nil {
		return err
	}
	server := pos[0]
	if _, err := netip.ParseAddr(server); err == nil {
		server = net.JoinHostPort(server, "53")
	}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(pos[1]), dns.TypeA)
	c := &dns.Client{Net: "udp", Timeout: *timeout}
	resp, _, err := c.Exchange(m, server)
	if err != nil {
		return err
	}
	fmt.Printf("rcode: %s\n", dns.RcodeToString[resp.Rcode])
	for _, rr := range resp.Answer {
		fmt.Println(rr)
	}
	return nil
}

func runSleep(args []string) error {
	fs := flag.NewFlagSet("sleep", flag.ContinueOnError)
	pos, err := parse(fs, args, 1, "DURATION")
	if err != nil {
		return err
	}
	d, err := time.ParseDuration(pos[0])
	if err != nil {
		return usageError{fmt.Sprintf("sleep %q: %v", pos[0], err)}
	}
	time.Sleep(d)
	return nil
}
