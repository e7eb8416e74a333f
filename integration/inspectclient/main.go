// Command inspectclient is the Go net/http client the inspect tests run
// inside a sandbox. It trusts what Go trusts by default (SSL_CERT_FILE,
// which doorman run sets to its bundle), so that it proves a Go program
// needs nothing but the environment doorman gives it. It takes the
// placeholder credential from DM_KEY, never the real one.
//
//	inspectclient check BASE  prints one tagged line per request: the
//	                          injected header seen by the server over
//	                          HTTP/2 and HTTP/1.1, the refused web-search
//	                          request and the same request without the tool
//	inspectclient hold BASE   asks the server for the digest of the
//	                          x-api-key it received, prints "ready PID
//	                          DIGEST" and waits for SIGTERM, so that the
//	                          test can read the memory of a process that
//	                          has used the placeholder
package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// Bodies of the model API call, with and without a server-side tool.
const (
	toolBody   = `{"model":"m","tools":[{"type":"web_search_20250305","name":"web_search"}]}`
	noToolBody = `{"model":"m","tools":[{"type":"bash_20250124","name":"bash"}]}`
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: inspectclient check|hold BASE")
		os.Exit(2)
	}
	base := os.Args[2]
	var err error
	switch os.Args[1] {
	case "check":
		err = check(base)
	case "hold":
		err = hold(base)
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "inspectclient:", err)
		os.Exit(1)
	}
}

// client is a tagged HTTP client.
type client struct {
	tag string
	*http.Client
}

// clients are Go's default transport (HTTP/2 when the server offers it)
// and one that offers and speaks only HTTP/1.1.
func clients() []client {
	var h1 http.Protocols
	h1.SetHTTP1(true)
	return []client{
		{"GOH2", &http.Client{Timeout: 10 * time.Second}},
		{"GOH1", &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{Protocols: &h1}}},
	}
}

func check(base string) error {
	for _, cl := range clients() {
		tag, c := cl.tag, cl.Client
		req, _ := http.NewRequest("GET", base+"/dm/headers", nil)
		req.Header.Set("x-api-key", os.Getenv("DM_KEY"))
		resp, err := c.Do(req)
		if err != nil {
			return fmt.Errorf("%s: %w", tag, err)
		}
		var seen struct {
			Headers map[string][]string `json:"headers"`
			Proto   string              `json:"proto"`
		}
		err = json.NewDecoder(resp.Body).Decode(&seen)
		resp.Body.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", tag, err)
		}
		fmt.Printf("%sHDR %s %s upstream=%s key=%s\n", tag, resp.Proto, resp.Status, seen.Proto, strings.Join(seen.Headers["X-Api-Key"], ","))
		for _, b := range []struct{ tag, body string }{{"DENY", toolBody}, {"PASS", noToolBody}} {
			resp, err := c.Post(base+"/v1/messages", "application/json", strings.NewReader(b.body))
			if err != nil {
				return fmt.Errorf("%s%s: %w", tag, b.tag, err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fmt.Printf("%s%s %d %s %s\n", tag, b.tag, resp.StatusCode, resp.Header.Get("Content-Type"), strings.TrimSpace(string(body)))
		}
	}
	return nil
}

func hold(base string) error {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	req, _ := http.NewRequest("GET", base+"/dm/header-digests", nil)
	req.Header.Set("x-api-key", os.Getenv("DM_KEY"))
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	var seen struct {
		Digests map[string][]string `json:"digests"`
	}
	err = json.NewDecoder(resp.Body).Decode(&seen)
	resp.Body.Close()
	if err != nil {
		return err
	}
	fmt.Printf("ready %d %s\n", os.Getpid(), strings.Join(seen.Digests["X-Api-Key"], ","))
	<-sig
	return nil
}
