package main

import (
	"crypto/tls"
	"crypto/x509"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

// fetch is `doorman-demo fetch --ca FILE URL`, the client the demo runs in
// the sandbox when curl is not installed: it prints the body, or the error
// (a TLS alert from doorman reads "remote error: tls: access denied"), and
// exits 0 or 1.
func fetch(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("doorman-demo fetch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	caFile := fs.String("ca", "", "PEM file of the CA to trust")
	if err := fs.Parse(args); err != nil || fs.NArg() != 1 {
		fmt.Fprintln(stderr, "usage: doorman-demo fetch --ca FILE URL")
		return 2
	}
	pem, err := os.ReadFile(*caFile)
	if err != nil {
		fmt.Fprintln(stderr, "fetch:", err)
		return 1
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	c := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, Proxy: nil},
	}
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
