package inspect

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http/httpguts"

	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// relay sends an admitted request upstream and streams the response
// back. It is httputil.ReverseProxy's relay without what a relay of one
// host to itself does not need (no rewriting beyond the target, no
// per-request proxy, header clone or copy buffer): the request re-framed
// by net/http's client, hop-by-hop fields dropped both ways, trailers and
// 1xx responses passed on, a body of unknown length or an event stream
// flushed as each part arrives. A WebSocket handshake goes through
// httputil.ReverseProxy, which relays the upgraded connection.
//
// A body read whole for a rule (buffered: r.Body reads it, and it is
// counted already) goes as it is: net/http's client writes an in-memory
// body in the same write as the header, where a body it must read sends
// the header on its own first; and it can be sent again when a pooled
// connection turns out closed before any of the request was written.
func (s *Server) relay(w http.ResponseWriter, r *http.Request, sc *sessionConn, rec *requestRecord, buffered []byte) {
	if r.Header.Get("Upgrade") != "" {
		if r.Body != nil && r.Body != http.NoBody && buffered == nil {
			r.Body = &countingBody{ReadCloser: r.Body, n: &rec.up}
		}
		s.reverseProxy(sc, rec).ServeHTTP(w, r)
		return
	}
	var mu sync.Mutex // w's header, between the transport's 1xx and here
	done := false
	out := r.WithContext(httptrace.WithClientTrace(r.Context(), &httptrace.ClientTrace{
		Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			mu.Lock()
			defer mu.Unlock()
			if !done {
				copyHeader(w.Header(), http.Header(h))
				w.WriteHeader(code)
				clear(w.Header())
			}
			return nil
		},
	}))
	u := *r.URL
	u.Scheme, u.Host = "https", sc.upstreamAuthority
	out.URL, out.RequestURI, out.Close = &u, "", false
	switch {
	case r.ContentLength == 0:
		out.Body = nil // lets the transport retry on a dead idle connection
	case buffered != nil:
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buffered)), nil }
	case r.Body != nil && r.Body != http.NoBody:
		// The transport may close or read the body after this handler
		// has returned; the server's body is closed by the server.
		body := &requestBody{r: r.Body, n: &rec.up}
		defer body.Close()
		out.Body = body
	}
	// out.Header is r.Header: this handler's to change.
	trailers := httpguts.HeaderValuesContainsToken(out.Header["Te"], "trailers")
	removeHopByHop(out.Header)
	if trailers {
		out.Header.Set("Te", "trailers")
	}
	if _, ok := out.Header["User-Agent"]; !ok {
		out.Header["User-Agent"] = []string{""} // not Go's default
	}
	resp, err := sc.upstream.RoundTrip(out)
	mu.Lock()
	done = true
	mu.Unlock()
	if err == nil && resp.StatusCode == http.StatusSwitchingProtocols {
		resp.Body.Close()
		err = errors.New("101 Switching Protocols to a request without an upgrade")
	}
	if err != nil {
		s.upstreamFailed(w, sc, rec, err)
		return
	}
	defer resp.Body.Close()
	body, why := rec.sets.armTripwire(resp)
	if why != "" {
		rec.verdict, rec.reason, rec.status = decisionlog.Deny, why, http.StatusBadGateway
		http.Error(w, "doorman: "+why, http.StatusBadGateway)
		return
	}
	body, tripped, err := rec.sets.readWhole(resp, body)
	if tripped {
		reason := rec.sets.reason(rec)
		rec.status = http.StatusForbidden
		s.writeSetRefusal(w, r, sc.s.Name, http.StatusForbidden, rec.rule, reason, "")
		return
	}
	if err != nil {
		s.upstreamFailed(w, sc, rec, err)
		return
	}
	rec.status = resp.StatusCode
	removeHopByHop(resp.Header)
	copyHeader(w.Header(), resp.Header)
	announced := len(resp.Trailer)
	if announced > 0 {
		keys := make([]string, 0, announced)
		for k := range resp.Trailer {
			keys = append(keys, k)
		}
		w.Header().Add("Trailer", strings.Join(keys, ", "))
	}
	w.WriteHeader(resp.StatusCode)
	if err := copyBody(w, body, streams(resp), &rec.down); err != nil {
		if errors.Is(err, errTripped) {
			rec.sets.tripped(w, rec, s.cfg.Sandbox)
		}
		// The status is sent: all that is left is to cut the
		// response short, so the client cannot take it for whole.
		panic(http.ErrAbortHandler)
	}
	resp.Body.Close() // fills resp.Trailer
	if len(resp.Trailer) == 0 {
		return
	}
	http.NewResponseController(w).Flush() // chunked, so trailers can follow
	if len(resp.Trailer) == announced {
		copyHeader(w.Header(), resp.Trailer)
		return
	}
	for k, vv := range resp.Trailer {
		w.Header()[http.TrailerPrefix+k] = append(w.Header()[http.TrailerPrefix+k], vv...)
	}
}

// upstreamFailed answers a request the upstream did not.
func (s *Server) upstreamFailed(w http.ResponseWriter, sc *sessionConn, rec *requestRecord, err error) {
	rec.verdict, rec.reason, rec.status = decisionlog.Error, "upstream: "+err.Error(), http.StatusBadGateway
	http.Error(w, fmt.Sprintf("doorman: the upstream %s failed: %v", sc.s.Name, err), http.StatusBadGateway)
}

// reverseProxy relays a WebSocket handshake and, once upgraded, its
// connection.
func (s *Server) reverseProxy(sc *sessionConn, rec *requestRecord) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "https"
			pr.Out.URL.Host = sc.upstreamAuthority
			pr.Out.Host = pr.In.Host
		},
		Transport: sc.upstream,
		ModifyResponse: func(resp *http.Response) error {
			rec.status = resp.StatusCode
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &rec.down}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) { s.upstreamFailed(w, sc, rec, err) },
		ErrorLog:     slog.NewLogLogger(slog.DiscardHandler, slog.LevelError),
	}
}

// hopHeaders are the fields of one connection (RFC 9110, 7.6.1), besides
// those the Connection field names.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopByHop(h http.Header) {
	for _, f := range h["Connection"] {
		for name := range strings.SplitSeq(f, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, k := range hopHeaders {
		delete(h, k)
	}
}

func copyHeader(dst, src http.Header) {
	for k, vv := range src {
		dst[k] = append(dst[k], vv...)
	}
}

// streams reports whether a response is flushed as it arrives: an event
// stream, or a body of unknown length (chunked, or an HTTP/2 body
// without a length).
func streams(resp *http.Response) bool {
	if resp.ContentLength < 0 {
		return true
	}
	return mediaType(resp.Header.Get("Content-Type")) == "text/event-stream"
}

// copyBufs are the buffers responses are copied through.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// copyBody copies a response body to w, counting its bytes, flushing
// after each write if flush.
func copyBody(w http.ResponseWriter, body io.Reader, flush bool, n *atomic.Int64) error {
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	for {
		nr, rerr := body.Read(*bp)
		if nr > 0 {
			n.Add(int64(nr))
			if _, err := w.Write((*bp)[:nr]); err != nil {
				return err
			}
			if flush {
				if f, ok := w.(http.Flusher); ok {
					f.Flush()
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}

// requestBody is a request body as the transport reads it: counted, and
// closed for the transport (not for the server, which closes it itself)
// when the handler returns.
type requestBody struct {
	r      io.Reader
	n      *atomic.Int64
	closed atomic.Bool
}

func (b *requestBody) Read(p []byte) (int, error) {
	if b.closed.Load() {
		return 0, errors.New("request body read after its handler returned")
	}
	n, err := b.r.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func (b *requestBody) Close() error {
	b.closed.Store(true)
	return nil
}
