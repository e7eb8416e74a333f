package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// fake101Path is where the fake internet's servers answer with a body
// holding a "HTTP/1.1 101" status line, sent once the client's next
// request has arrived (testnet.Fake101Path).
const fake101Path = "/fake-101"

// readResponse reads one response on br and notes its status and the first
// line of its body.
func readResponse(t *tally, what string, br *bufio.Reader, method string) bool {
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.fail(what, err)
		return false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if err != nil {
		t.fail(what+" body", err)
		return false
	}
	t.note("%s: HTTP %d %q", what, resp.StatusCode, firstLine(body))
	return true
}

func tryHTTPDesync(cfg *config) row {
	var t tally
	dst := netip.AddrPortFrom(cfg.allowed4, cfg.httpPort)
	c, err := dial(cfg, dst, nil)
	if err != nil {
		t.fail("connect "+dst.String(), err)
		return t.row("http-desync")
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(4 * cfg.timeout))
	br := bufio.NewReader(c)
	write := func(what, s string) bool {
		n, err := io.WriteString(c, s)
		t.wrote(n)
		if err != nil {
			t.fail(what, err)
		}
		return err == nil
	}
	// 1: the response's head comes at once, its body (a 101 status line)
	// only after request 2 has gone out.
	if !write("request 1", fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", fake101Path, cfg.allowedName)) {
		return t.row("http-desync")
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.fail("response 1", err)
		return t.row("http-desync")
	}
	t.note("response 1: HTTP %d, %d-byte body to come", resp.StatusCode, resp.ContentLength)
	// 2: a WebSocket upgrade, outstanding while that body arrives.
	if !write("request 2", fmt.Sprintf("GET /escape-ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", cfg.allowedName, base64.StdEncoding.EncodeToString([]byte(randomHex(8))))) {
		return t.row("http-desync")
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.fail("body of response 1", err)
		return t.row("http-desync")
	}
	t.note("body of response 1: %q", firstLine(body))
	if !readResponse(&t, "response 2 (the upgrade)", br, http.MethodGet) {
		return t.row("http-desync")
	}
	// 3: another virtual host on the same connection.
	if !write("request 3", fmt.Sprintf("POST /escape-http-desync HTTP/1.1\r\nHost: %s\r\nContent-Length: 40\r\n\r\n%-40s", cfg.deniedName, "secret="+randomHex(8))) {
		return t.row("http-desync")
	}
	readResponse(&t, "request 3 for "+cfg.deniedName, br, http.MethodPost)
	return t.row("http-desync")
}

func tryH2CUpgrade(cfg *config) row {
	var t tally
	h2cUpgrade(&t, cfg)
	return t.row("h2c-upgrade")
}

// h2cUpgrade does tryH2CUpgrade's work, counting what it wrote.
func h2cUpgrade(t *tally, cfg *config) {
	dst := netip.AddrPortFrom(cfg.allowed4, cfg.httpPort)
	raw, err := dial(cfg, dst, nil)
	if err != nil {
		t.fail("connect "+dst.String(), err)
		return
	}
	defer raw.Close()
	raw.SetDeadline(time.Now().Add(4 * cfg.timeout))
	c := &countingConn{Conn: raw}
	defer func() { t.wrote(c.written) }()
	// SETTINGS_MAX_CONCURRENT_STREAMS = 100, as HTTP2-Settings carries it.
	settings := base64.RawURLEncoding.EncodeToString([]byte{0, 3, 0, 0, 0, 100})
	req := fmt.Sprintf("GET /escape-h2c-upgrade HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: %s\r\n\r\n", cfg.allowedName, settings)
	if _, err := io.WriteString(c, req); err != nil {
		t.fail("upgrade request", err)
		return
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodGet})
	if err != nil {
		t.fail("upgrade response", err)
		return
	}
	t.note("upgrade: HTTP %d %s", resp.StatusCode, resp.Header.Get("Upgrade"))
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		t.note("not upgraded: %q", firstLine(body))
		return
	}
	// HTTP/2 from here: the preface, then a request on stream 3 (stream 1
	// is the upgraded request's) for the denied name.
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.fail("HTTP/2 preface", err)
		return
	}
	fr := http2.NewFramer(c, br)
	var hdr bytes.Buffer
	enc := hpack.NewEncoder(&hdr)
	body := payload("h2c-upgrade")
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":authority", cfg.deniedName},
		{":path", "/escape-h2c-upgrade"}, {"content-length", fmt.Sprint(len(body))}} {
		enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := fr.WriteSettings(); err != nil {
		t.fail("SETTINGS", err)
		return
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: hdr.Bytes(), EndHeaders: true}); err != nil {
		t.fail("HEADERS", err)
		return
	}
	if err := fr.WriteData(3, true, body); err != nil {
		t.fail("DATA", err)
		return
	}
	// Read until stream 3 ends.
	dec := hpack.NewDecoder(4096, nil)
	var notes []string
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.fail("HTTP/2 frames", err)
			break
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				fr.WriteSettingsAck()
			}
			continue
		case *http2.HeadersFrame:
			fields, _ := dec.DecodeFull(f.HeaderBlockFragment())
			for _, hf := range fields {
				if hf.Name == ":status" {
					notes = append(notes, fmt.Sprintf("stream %d: status %s", f.StreamID, hf.Value))
				}
			}
		case *http2.DataFrame:
			if len(f.Data()) > 0 {
				notes = append(notes, fmt.Sprintf("stream %d: %q", f.StreamID, firstLine(f.Data())))
			}
		case *http2.RSTStreamFrame:
			notes = append(notes, fmt.Sprintf("stream %d reset: %v", f.StreamID, f.ErrCode))
		case *http2.GoAwayFrame:
			notes = append(notes, fmt.Sprintf("GOAWAY %v", f.ErrCode))
		}
		if f.Header().StreamID == 3 && f.Header().Flags.Has(http2.FlagDataEndStream) || f.Header().Type == http2.FrameGoAway ||
			f.Header().Type == http2.FrameRSTStream && f.Header().StreamID == 3 {
			break
		}
	}
	t.note("HTTP/2 after the upgrade: %s", strings.Join(notes, "; "))
}
