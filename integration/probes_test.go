package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/doorman-net/doorman/integration/testnet"
)

// curlResult is what a real curl run inside a namespace did.
type curlResult struct {
	exit           int
	stdout, stderr string
}

// curl runs curl inside ns with the test CA and a short timeout.
func curl(t *testing.T, ns *testnet.Netns, caFile string, args ...string) curlResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	full := append([]string{"-sS", "--max-time", "8", "--cacert", caFile}, args...)
	cmd := ns.Command(ctx, "curl", full...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := curlResult{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.exit = ee.ExitCode()
	default:
		t.Fatalf("run curl: %v", err)
	}
	return r
}

func (r curlResult) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", r.exit, r.stdout, r.stderr)
}

// ping sends one ICMP echo from inside ns and waits a second for the reply.
func ping(ns *testnet.Netns, dst netip.Addr) error {
	return ns.Do(func() error {
		network, typ := "ip4:icmp", icmp.Type(ipv4.ICMPTypeEcho)
		proto := 1
		if dst.Is6() {
			network, typ, proto = "ip6:ipv6-icmp", ipv6.ICMPTypeEchoRequest, 58
		}
		c, err := icmp.ListenPacket(network, "")
		if err != nil {
			return err
		}
		defer c.Close()
		id := os.Getpid() & 0xffff
		msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: 1, Data: []byte("doorman-ping")}}
		b, _ := msg.Marshal(nil)
		if _, err := c.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		buf := make([]byte, 1500)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return err
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err != nil {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && (m.Type == ipv4.ICMPTypeEchoReply || m.Type == ipv6.ICMPTypeEchoReply) && string(e.Data) == "doorman-ping" {
				return nil
			}
		}
	})
}

// tcpSendRecv connects from ns to addr, sends data and reads a reply with a
// short deadline. It returns the connect or read error (nil if a byte came back).
func tcpSendRecv(ns *testnet.Netns, addr netip.AddrPort, data string) error {
	c, err := ns.DialTCP(addr.String())
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte(data)); err != nil {
		return err
	}
	_, err = c.Read(make([]byte, 1))
	return err
}

// udpEcho sends a datagram from ns to addr and waits briefly for its echo.
func udpEcho(ns *testnet.Netns, addr netip.AddrPort) error {
	c, err := ns.DialUDP(addr.String())
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("doorman-udp")); err != nil {
		return err
	}
	_, err = c.Read(make([]byte, 64))
	return err
}
