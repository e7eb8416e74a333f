package integration

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doorman-net/doorman/integration/testnet"
)

// bareRelayEnv, set in the environment of this test binary, makes it a bare
// TCP relay instead of a test run (see runBareRelay). The relay benchmarks
// start it as a separate process, like the doorman proxy, to show how much
// of the proxy's cost any user-space TCP relay pays on the same machine.
const bareRelayEnv = "DOORMAN_BENCH_BARE_RELAY"

func init() {
	if spec, ok := os.LookupEnv(bareRelayEnv); ok {
		os.Exit(runBareRelay(spec, os.Stdin, os.Stdout, os.Stderr))
	}
}

// runBareRelay is the smallest user-space TCP relay: for each
// "listen>upstream" pair in spec (comma-separated addr:port), it accepts
// connections, dials upstream and relays both directions the way the
// doorman proxy does (io.Copy between bare *net.TCPConn, which splices, then
// CloseWrite), without redirect, sniffing, policy, DNS or logging. It writes
// "ready" once listening and exits when stdin closes.
func runBareRelay(spec string, stdin io.Reader, stdout, stderr io.Writer) int {
	var lns []net.Listener
	for _, pair := range strings.Split(spec, ",") {
		listen, upstream, ok := strings.Cut(pair, ">")
		if !ok {
			fmt.Fprintf(stderr, "bare relay: %q: want listen>upstream\n", pair)
			return 2
		}
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			fmt.Fprintf(stderr, "bare relay: %v\n", err)
			return 1
		}
		lns = append(lns, ln)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					if errors.Is(err, net.ErrClosed) {
						return
					}
					time.Sleep(10 * time.Millisecond)
					continue
				}
				go bareRelayConn(c.(*net.TCPConn), upstream)
			}
		}()
	}
	fmt.Fprintln(stdout, "ready")
	io.Copy(io.Discard, stdin)
	for _, ln := range lns {
		ln.Close()
	}
	return 0
}

func bareRelayConn(c *net.TCPConn, upstream string) {
	defer c.Close()
	u, err := net.DialTimeout("tcp", upstream, 5*time.Second)
	if err != nil {
		return
	}
	up := u.(*net.TCPConn)
	defer up.Close()
	done := make(chan struct{})
	go func() {
		io.Copy(c, up)
		c.CloseWrite()
		close(done)
	}()
	io.Copy(up, c)
	up.CloseWrite()
	<-done
}

// startBareRelay starts the bare relay as a process of its own in ns and in
// a cgroup of its own (benchCgroup; with GOMAXPROCS=2, sandbox.Enforce
// starts the proxy with 1), serving the pairs of spec, and stops it at the
// end of the benchmark. It returns the pid.
func startBareRelay(b *testing.B, where *testnet.Netns, spec string) int {
	b.Helper()
	grp := benchCgroup(b, "bare-relay")
	r := startRelayProcess(b, where, "bare relay", bareRelayEnv+"="+spec)
	if r.line != "ready\n" {
		r.stop()
		b.Fatalf("bare relay did not start (%q, %v): %s", r.line, r.err, r.stderr.String())
	}
	benchJoin(b, grp, r.pid)
	return r.pid
}

// relayProcess is a relay startRelayProcess started.
type relayProcess struct {
	pid    int
	line   string // its first line of output: "ready\n" once it serves
	err    error  // reading that line
	stop   func() // closes its stdin and waits (kills it after 5 s)
	stderr *strings.Builder
}

// startRelayProcess starts this test binary as a relay in where (started
// from a thread inside it, the process lives there) with GOMAXPROCS=2 and
// env (its role's variable), reads its first line, and stops it at the end
// of the benchmark.
func startRelayProcess(b *testing.B, where *testnet.Netns, name, env string) relayProcess {
	b.Helper()
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "GOMAXPROCS=2", env}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	r := relayProcess{stderr: &strings.Builder{}}
	cmd.Stderr = r.stderr
	if err := where.Do(cmd.Start); err != nil {
		b.Fatalf("start the %s: %v", name, err)
	}
	var once sync.Once
	r.stop = func() {
		once.Do(func() {
			stdin.Close()
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		})
	}
	b.Cleanup(r.stop)
	r.pid = cmd.Process.Pid
	r.line, r.err = bufio.NewReader(stdout).ReadString('\n')
	return r
}
