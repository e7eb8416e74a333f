package integration

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce"
	"github.com/doorman-net/doorman/integration/testnet"
)

// The relay benchmarks measure doorman against the tools a user would pick
// instead, from Debian, each configured as an SNI allowlist for benchName
// and run as a process of its own in the host namespace, like the doorman
// proxy:
//
//   - HAProxy 2.6, mode tcp: it binds its listeners inside its sandbox
//     (`bind … namespace`, as doorman's proxy holds listeners created
//     there), and the sandbox gets doorman's own ruleset (enforce.Apply)
//     with HAProxy's ports as the redirect target. It reads the original
//     destination with SO_ORIGINAL_DST (`server s 0.0.0.0:0`) and dials it
//     from the host namespace.
//   - Squid 5 (squid-openssl), https_port intercept with ssl_bump peek at
//     step 1, then splice for the allowed SNI, terminate otherwise. Squid
//     cannot listen in another namespace, so its sandbox is intercepted
//     where a router would intercept it: a redirect in the host namespace
//     on the host side of the sandbox's veth (see squidRuleset). It dials
//     the original destination from the host namespace.
const (
	haproxyPort4       = 15101 // HAProxy's listeners inside its sandbox
	haproxyPort6       = 15102
	squidInterceptPort = 3129 // Squid's https_port in the host namespace
	squidForwardPort   = 3128 // the forward-proxy port Squid insists on, on host's loopback
	// benchPeerMaxConn bounds Squid's connections (max_filedescriptors
	// is twice it: two descriptors per relayed connection), below the
	// hard open-file limit of these machines (20000).
	benchPeerMaxConn = 7000
	// haproxyMaxPipes bounds HAProxy's splice pipes (maxpipes; two
	// descriptors each). Its default, maxconn/4, would take a quarter of
	// the descriptors that the held-connection row needs for sockets; a
	// pipe is only held while data is in flight (at most a few dozen at
	// once in these benchmarks).
	haproxyMaxPipes = 600
	// haproxyMaxConnCap is the most connections HAProxy is configured
	// for: the held-connection row's benchHeldConns and some room.
	haproxyMaxConnCap = benchHeldConns + 2000
	// benchPeerSniffTimeout is how long a peer waits for a ClientHello,
	// as long as the doorman proxy's sniff timeout.
	benchPeerSniffTimeout = 10 * time.Second
	// squidTable is the host-side table that intercepts Squid's sandbox.
	squidTable = "dm-bench-squid"
)

// benchPeerBinary finds a peer's binary, "" if it is not installed.
func benchPeerBinary(name string) string {
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p := filepath.Join("/usr/sbin", name); benchIsExecutable(p) {
		return p
	}
	return ""
}

func benchIsExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// haproxyConfig is HAProxy as a transparent SNI allowlist: wait up to the
// sniff timeout for a whole ClientHello, relay an allowed SNI to the
// original destination, refuse everything else. It logs one line per
// connection (as doorman logs one decision per connection), always
// splices (splice-request and splice-response: splice-auto got 4 Gbit/s
// rather than 10 on one stream here), and runs two threads, its own default on this
// 2-core machine (the doorman proxy runs with GOMAXPROCS=1). maxconn is
// its cap on connections (see haproxyMaxConn).
func haproxyConfig(netnsName string, maxconn int) string {
	return fmt.Sprintf(`global
    maxconn %[1]d
    maxpipes %[7]d
    nbthread 2
    log stdout format raw local0 info

defaults
    mode tcp
    log global
    option tcplog
    option splice-request
    option splice-response
    timeout connect 5s
    timeout client 1h
    timeout server 1h

frontend sni_allowlist
    bind 0.0.0.0:%[2]d namespace %[4]s
    bind [::]:%[3]d v6only namespace %[4]s
    tcp-request inspect-delay %[5]ds
    tcp-request content accept if { req.ssl_hello_type 1 }
    tcp-request content reject
    use_backend original_destination if { req.ssl_sni -i %[6]s }
    default_backend refuse

backend original_destination
    server s 0.0.0.0:0

backend refuse
    tcp-request content reject
`, maxconn, haproxyPort4, haproxyPort6, netnsName, int(benchPeerSniffTimeout.Seconds()), benchName, haproxyMaxPipes)
}

// haproxyMaxConn is the maxconn HAProxy gets under a hard descriptor
// limit of noFile: haproxyMaxConnCap, or what fits. HAProxy needs
// 2*maxconn + 2*maxpipes + a few descriptors (18 with this config;
// it refuses to start with "Cannot raise FD limit" otherwise), and
// sets its own limit to that.
func haproxyMaxConn(noFile uint64) int {
	const own = 100 // listeners, log, pollers, threads, and room
	fit := (int64(noFile) - 2*haproxyMaxPipes - own) / 2
	return int(max(min(fit, haproxyMaxConnCap), 1))
}

// startHAProxy runs HAProxy in the host namespace with its listeners in
// sb, then gives sb doorman's ruleset redirecting to them. It returns the
// pid and its log file, or 0 (with a log line) if HAProxy is not installed.
func startHAProxy(b *testing.B, n *testnet.Net, sb *testnet.Sandbox, maxconn int) (int, []string) {
	b.Helper()
	bin := benchPeerBinary("haproxy")
	if bin == "" {
		b.Log("haproxy is not installed (apt-get install -y haproxy): the haproxy path is skipped")
		return 0, nil
	}
	dir := b.TempDir()
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(haproxyConfig(sb.Name(), maxconn)), 0o644); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command(bin, "-c", "-f", cfg).CombinedOutput(); err != nil {
		b.Fatalf("haproxy -c -f %s: %v: %s", cfg, err, out)
	}
	// -db: stay in the foreground, no master process.
	log := filepath.Join(dir, "haproxy.log")
	pid := startBenchPeer(b, n.HostNS(), "haproxy", log, bin, "-db", "-f", cfg)
	if err := benchWaitListening(sb.Netns, haproxyPort4, pid); err != nil {
		b.Fatalf("haproxy: %v (log in %s)", err, dir)
	}
	spec := enforce.Spec{Port4: haproxyPort4, Port6: haproxyPort6, Resolvers: []netip.Addr{n.DNS}, AllowICMP: true}
	if err := enforce.Apply(sb.Path(), spec); err != nil {
		b.Fatalf("haproxy's sandbox: enforce.Apply: %v", err)
	}
	b.Cleanup(func() { enforce.Remove(sb.Path()) })
	return pid, []string{log}
}

// squidConfig is Squid as a transparent SNI allowlist: intercepted TLS is
// peeked at step 1 (the ClientHello), spliced to the original destination
// if its SNI is allowed, terminated otherwise. Nothing is cached; each
// connection is logged (access_log, Squid's default, to a file).
func squidConfig(dir string, dns netip.Addr) string {
	return fmt.Sprintf(`http_port 127.0.0.1:%[1]d
https_port %[2]d intercept ssl-bump tls-cert=%[3]s/ca.pem tls-key=%[3]s/ca.key generate-host-certificates=off
acl step1 at_step SslBump1
acl allowed_sni ssl::server_name %[4]s
ssl_bump peek step1
ssl_bump splice allowed_sni
ssl_bump terminate all
http_access allow all
cache deny all
cache_mem 0 MB
max_filedescriptors %[5]d
request_start_timeout %[6]d seconds
pid_filename %[3]s/squid.pid
cache_log %[3]s/cache.log
access_log stdio:%[3]s/access.log
coredump_dir %[3]s
netdb_filename none
pinger_enable off
dns_nameservers %[7]s
visible_hostname doorman-bench
shutdown_lifetime 1 seconds
`, squidForwardPort, squidInterceptPort, dir, benchName, 2*benchPeerMaxConn, int(benchPeerSniffTimeout.Seconds()), dns)
}

// startSquid runs Squid in the host namespace and intercepts sb's TCP
// towards it (squidRuleset). Squid needs a CA for ssl_bump even when it
// only splices: a throwaway one is made here. It returns the pid and its
// log files, or 0 (with a log line) if Squid is not installed.
func startSquid(b *testing.B, n *testnet.Net, sb *testnet.Sandbox) (int, []string) {
	b.Helper()
	bin := benchPeerBinary("squid")
	if bin == "" {
		b.Log("squid is not installed (apt-get install -y squid-openssl): the squid path is skipped")
		return 0, nil
	}
	// Squid drops to its own user (proxy) after reading its
	// configuration: its directory must be its own, and reachable, which
	// b.TempDir's (under a 0700 parent) is not.
	dir, err := os.MkdirTemp("", "dm-bench-squid-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	if err := writeBenchCA(dir); err != nil {
		b.Fatal(err)
	}
	cfg := filepath.Join(dir, "squid.conf")
	if err := os.WriteFile(cfg, []byte(squidConfig(dir, n.DNS)), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := benchChownTo(dir, "proxy"); err != nil {
		b.Fatal(err)
	}
	if out, err := exec.Command(bin, "-k", "parse", "-f", cfg).CombinedOutput(); err != nil {
		b.Fatalf("squid -k parse -f %s: %v: %s", cfg, err, out)
	}
	// -N: stay in the foreground, no kid processes.
	pid := startBenchPeer(b, n.HostNS(), "squid", filepath.Join(dir, "squid.out"), bin, "-N", "-f", cfg)
	if err := benchWaitListening(n.HostNS(), squidInterceptPort, pid); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "cache.log"))
		b.Fatalf("squid: %v; cache.log:\n%s", err, log)
	}
	if err := applySquidRuleset(n.HostPath(), sb.HostIface); err != nil {
		b.Fatalf("squid's interception: %v", err)
	}
	b.Cleanup(func() {
		if err := removeSquidRuleset(n.HostPath()); err != nil {
			b.Errorf("remove %s: %v", squidTable, err)
		}
	})
	return pid, []string{filepath.Join(dir, "cache.log"), filepath.Join(dir, "access.log")}
}

// startBenchPeer starts bin with args as a process of its own in where and
// in a cgroup of its own (benchCgroup), its output to logFile, and stops it
// (SIGTERM, then SIGKILL after 5 s) at the end of the benchmark. It returns
// the pid.
func startBenchPeer(b *testing.B, where *testnet.Netns, name, logFile, bin string, args ...string) int {
	b.Helper()
	grp := benchCgroup(b, name)
	out, err := os.Create(logFile)
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// Started from a thread inside where, the process lives there.
	err = where.Do(cmd.Start)
	out.Close()
	if err != nil {
		b.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	var once sync.Once
	b.Cleanup(func() {
		once.Do(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // its process group: its own
				<-done
			}
		})
	})
	benchJoin(b, grp, cmd.Process.Pid)
	select {
	case <-done:
		log, _ := os.ReadFile(logFile)
		b.Fatalf("%s exited at once: %s", name, log)
	case <-time.After(100 * time.Millisecond):
	}
	return cmd.Process.Pid
}

// benchWaitListening waits up to 10 s until a TCP socket listens on port in
// where (read from /proc/thread-self/net/tcp and tcp6 on a thread inside
// it), and
// pid is still alive.
func benchWaitListening(where *testnet.Netns, port uint16, pid int) error {
	want := fmt.Sprintf(":%04X ", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var found bool
		err := where.Do(func() error {
			for _, file := range []string{"tcp", "tcp6"} {
				f, err := os.Open("/proc/thread-self/net/" + file)
				if err != nil {
					return err
				}
				sc := bufio.NewScanner(f)
				for sc.Scan() {
					fl := strings.Fields(sc.Text())
					// sl local_address rem_address st …; st 0A is LISTEN
					if len(fl) > 3 && strings.HasSuffix(fl[1]+" ", want) && fl[3] == "0A" {
						found = true
					}
				}
				f.Close()
				if err := sc.Err(); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if found {
			return nil
		}
		if err := syscall.Kill(pid, 0); err != nil {
			return fmt.Errorf("pid %d is gone before listening on port %d", pid, port)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on port %d in %s after 10 s", port, where.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// benchChownTo gives dir and everything in it to the named user.
func benchChownTo(dir, name string) error {
	u, err := user.Lookup(name)
	if err != nil {
		return fmt.Errorf("user %q: %w", name, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return filepath.Walk(dir, func(path string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, uid, gid)
	})
}

// writeBenchCA writes a throwaway CA certificate and key (ca.pem, ca.key)
// into dir, for Squid's ssl-bump port: it never signs anything here, since
// Squid only splices or terminates.
func writeBenchCA(dir string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "doorman bench squid CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.pem"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "ca.key"), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}), 0o600)
}

// applySquidRuleset installs, in the host namespace at hostNS, table ip
// dm-bench-squid:
//
//	chain raw-prerouting  type filter hook prerouting priority raw
//	    iifname != IFACE notrack
//	chain raw-output      type filter hook output priority raw
//	    oifname != IFACE notrack
//	chain nat-prerouting  type nat hook prerouting priority dstnat
//	    iifname IFACE meta l4proto tcp redirect to :3129
//
// The redirect is Squid's interception of its sandbox, whose veth ends in
// IFACE. A NAT chain turns connection tracking on for the whole namespace;
// the notrack chains keep it to that one interface, so the other paths of
// the benchmark (which cross the host namespace untracked) pay nothing for
// Squid's interception.
func applySquidRuleset(hostNS, iface string) error {
	return nftIn(hostNS, func(c *nftables.Conn) error {
		t := c.AddTable(&nftables.Table{Name: squidTable, Family: nftables.TableFamilyIPv4})
		name := make([]byte, unix.IFNAMSIZ)
		copy(name, iface)
		ifname := func(key expr.MetaKey, op expr.CmpOp) []expr.Any {
			return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: op, Register: 1, Data: name}}
		}
		chain := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority, exprs ...expr.Any) {
			ch := c.AddChain(&nftables.Chain{Name: name, Table: t, Type: typ, Hooknum: hook, Priority: prio})
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs})
		}
		chain("raw-prerouting", nftables.ChainTypeFilter, nftables.ChainHookPrerouting, nftables.ChainPriorityRaw,
			append(ifname(expr.MetaKeyIIFNAME, expr.CmpOpNeq), &expr.Notrack{})...)
		chain("raw-output", nftables.ChainTypeFilter, nftables.ChainHookOutput, nftables.ChainPriorityRaw,
			append(ifname(expr.MetaKeyOIFNAME, expr.CmpOpNeq), &expr.Notrack{})...)
		redirect := append(ifname(expr.MetaKeyIIFNAME, expr.CmpOpEq),
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(squidInterceptPort)},
			&expr.Redir{RegisterProtoMin: 1, RegisterProtoMax: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED})
		chain("nat-prerouting", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest, redirect...)
		if err := c.Flush(); err != nil {
			return fmt.Errorf("table ip %s in %s: %w", squidTable, hostNS, err)
		}
		return nil
	})
}

// removeSquidRuleset deletes table ip dm-bench-squid from hostNS.
func removeSquidRuleset(hostNS string) error {
	return nftIn(hostNS, func(c *nftables.Conn) error {
		c.DelTable(&nftables.Table{Name: squidTable, Family: nftables.TableFamilyIPv4})
		return c.Flush()
	})
}
