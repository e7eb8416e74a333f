package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"time"
)

// fetch is `doorman-demo fetch --ca FILE [--resolve HOST:ADDR] URL`, the
// client the demo runs in the sandbox when curl is not installed: it prints
// the body, or the error (a TLS alert from doorman reads "remote error: tls:
// access denied"), and exits 0 or 1. With --resolve it connects to ADDR
// whenever HOST is dialled, as curl's --resolve does, and still sends HOST
// as the TLS server name and the HTTP Host.
func fetch(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doorman-demo fetch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	caFile := fs.String("ca", "", "PEM file of the CA to trust")
	resolve := fs.String("resolve", "", "HOST:ADDR: connect to the IP address ADDR whenever HOST is dialled")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: doorman-demo fetch --ca FILE [--resolve HOST:ADDR] URL")
		return 2
	}
	pem, err := os.ReadFile(*caFile)
	if err != nil {
		fmt.Fprintln(stderr, "fetch:", err)
		return 1
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	transport := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, Proxy: nil}
	if *resolve != "" {
		host, addr, err := parseResolve(*resolve)
		if err != nil {
			fmt.Fprintln(stderr, "fetch:", err)
			return 2
		}
		var d net.Dialer
		transport.DialContext = func(ctx context.Context, network, address string) (net.Conn, error) {
			h, port, err := net.SplitHostPort(address)
			if err == nil && strings.EqualFold(h, host) {
				address = net.JoinHostPort(addr.String(), port)
			}
			return d.DialContext(ctx, network, address)
		}
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: transport}
	resp, err := c.Get(fs.Arg(0))
	if err != nil {
		fmt.Fprintln(stderr, "fetch:", err)
		return 1
	}
	defer resp.Body.Close()
	io.Copy(stdout, resp.Body)
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintln(stderr, "fetch:", resp.Status)
		return 1
	}
	return 0
}

// parseResolve parses --resolve's HOST:ADDR (ADDR an IPv4 or IPv6 address,
// the latter with or without brackets).
func parseResolve(s string) (string, netip.Addr, error) {
	host, rest, ok := strings.Cut(s, ":")
	addr, err := netip.ParseAddr(strings.Trim(rest, "[]"))
	if !ok || host == "" || err != nil {
		return "", netip.Addr{}, fmt.Errorf("--resolve %q: want HOST:ADDR with ADDR an IP address", s)
	}
	return host, addr, nil
}
