package inspect

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// requestRecord gathers one request's decision line.
type requestRecord struct {
	verdict, rule, reason string
	status                int
	up, down              atomic.Int64
	sets                  *setRecord // what rule sets did (nil: no set covers the host)
}

// serveHTTP judges one request of a session and relays or refuses it.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	sc, _ := r.Context().Value(sessionKey{}).(*sessionConn)
	if sc == nil {
		http.Error(w, "doorman: no session", http.StatusInternalServerError)
		return
	}
	sess := sc.s
	start := time.Now()
	sc.requests.Add(1)
	rec := &requestRecord{verdict: decisionlog.Allow}
	sw := &statusWriter{ResponseWriter: w}
	defer func() {
		if rec.status == 0 {
			rec.status = sw.status
		}
		if rec.verdict == decisionlog.Deny {
			sc.denied.Add(1)
		}
		proto := "h1"
		if r.ProtoMajor == 2 {
			proto = "h2"
		}
		line := decisionlog.Request{
			Sandbox: s.cfg.Sandbox, Client: sess.Client, Dst: sess.Dst, Proto: proto, Name: sess.Name,
			Method: logSafe(r.Method), Path: logSafe(r.URL.Path), Rule: rec.rule, Verdict: rec.verdict, Reason: rec.reason,
			Status: rec.status, BytesUp: rec.up.Load(), BytesDown: rec.down.Load(), Duration: time.Since(start),
		}
		rec.sets.logFields(&line)
		line.Log(context.Background(), s.cfg.Logger)
		rec.sets.release()
	}()
	hold := &bodyHold{sem: s.bodies}
	defer hold.release()
	refuse := func(status int, rule, reason string) {
		rec.verdict, rec.rule, rec.reason, rec.status = decisionlog.Deny, rule, reason, status
		s.writeRefusal(sw, r, sess.Name, status, rule, reason)
	}

	if why := checkRequest(r, sess); why != "" {
		refuse(http.StatusForbidden, "", why)
		return
	}
	// What the rules read is what the upstream reads: the session's host
	// in its canonical spelling, without the fields that are not
	// forwarded (those the client's Connection names, those only a
	// proxy may send) and without request trailers, which no rule reads.
	r.Host = canonicalAuthority(r.Host, sess)
	delete(r.Header, "Host")
	dropConnectionFields(r.Header)
	dropProxyHeaders(r.Header)
	r.Trailer = nil
	var h *conf.InspectHost
	if pol := s.cfg.Policy(); pol != nil {
		h = pol.InspectFor(sess.Name)
	}
	if h == nil {
		// The policy stopped inspecting the host while the session was
		// open: it is still admitted (or the proxy would have closed
		// the session), so the request passes with no rule to judge it.
		h = &conf.InspectHost{Host: sess.Name}
	}
	target, err := conf.ParseTarget(originForm(r))
	if err != nil {
		refuse(http.StatusForbidden, "", err.Error())
		return
	}
	// What is judged is what is forwarded: the path as ParseTarget
	// normalized it (net/url sends RawPath as it is), the query as sent.
	r.URL.Opaque, r.URL.Path, r.URL.RawPath = "", target.Path, target.EscapedPath
	query, err := url.ParseQuery(target.RawQuery)
	if err != nil {
		refuse(http.StatusForbidden, "", "the query does not parse: "+err.Error())
		return
	}
	req := &conf.Request{Method: r.Method, Path: target.Path, EscapedPath: target.EscapedPath, Query: query, Header: r.Header}
	if len(h.Inject) > 0 && (strings.EqualFold(r.Method, "TRACE") || strings.EqualFold(r.Method, "TRACK")) {
		// An origin that answers TRACE sends the request back, the
		// credential put into it included.
		refuse(http.StatusForbidden, "", logSafe(r.Method)+" to a host doorman puts a credential in (the answer would echo it)")
		return
	}
	if h.NeedsBody(req) {
		if ce := contentCoding(r.Header); ce != "" {
			refuse(http.StatusForbidden, "", "a body rule applies and the body is encoded ("+logSafe(ce)+")")
			return
		}
		limit := h.BodyLimit()
		if r.ContentLength > limit {
			refuse(http.StatusRequestEntityTooLarge, "", fmt.Sprintf("%s (%d bytes, limit %d)", decisionlog.ReasonBodyTooLarge, r.ContentLength, limit))
			return
		}
		done := s.watchIdle(sw, r)
		body, err := readBody(r, limit, hold)
		done()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			refuse(http.StatusRequestTimeout, "", fmt.Sprintf("the body stalled: no byte for %v while it was read to be judged", s.bodyIdle))
			return
		}
		if errors.Is(err, errBodiesHeld) {
			sw.Header().Set("Retry-After", "1")
			refuse(http.StatusServiceUnavailable, "", err.Error())
			return
		}
		if err != nil {
			refuse(http.StatusBadRequest, "", "reading the body: "+err.Error())
			return
		}
		if int64(len(body)) > limit {
			refuse(http.StatusRequestEntityTooLarge, "", fmt.Sprintf("%s (limit %d)", decisionlog.ReasonBodyTooLarge, limit))
			return
		}
		req.Body = body
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		r.TransferEncoding = nil
		rec.up.Store(r.ContentLength)
	}
	j := h.Judge(req)
	rec.rule = j.Rule
	if j.Verdict == conf.VerdictDeny {
		refuse(http.StatusForbidden, j.Rule, j.Reason)
		return
	}
	if !s.applyRuleSets(sw, r, sc, h, req, rec, hold) {
		return
	}
	for _, in := range h.Inject {
		vals := r.Header.Values(in.Header)
		if len(vals) != 1 {
			continue
		}
		prefix, ok := in.Matches(vals[0])
		if !ok {
			continue
		}
		secret, err := s.secrets.get(in.SecretFile)
		if err != nil {
			rec.verdict, rec.reason, rec.status = decisionlog.Error, err.Error(), http.StatusBadGateway
			http.Error(sw, "doorman: the credential for "+sess.Name+" cannot be read on the host; see the decision log", http.StatusBadGateway)
			return
		}
		r.Header.Set(in.Header, prefix+string(secret))
	}
	s.relay(sw, r, sc, rec, req.Body)
}

// proxyHeaders are what dropProxyHeaders drops, besides X-Forwarded-*.
var proxyHeaders = []string{"forwarded", "x-original-url", "x-original-uri", "x-rewrite-url", "x-envoy-original-path"}

// dropProxyHeaders removes what only a proxy in front of the origin may
// say, however the client spelled its name ('_' for '-', which CGI, WSGI,
// Rack and PHP read alike): Forwarded and X-Forwarded-* (the client's
// address, the host, the prefix Spring puts before the path), and the
// path overrides X-Original-URL, X-Original-URI, X-Rewrite-URL and
// X-Envoy-Original-Path, with which IIS, Symfony and Zend route a
// request to another path than the one the rules judged.
func dropProxyHeaders(h http.Header) {
	for k := range h {
		if conf.HasHeaderPrefix(k, "x-forwarded-") || slices.ContainsFunc(proxyHeaders, func(p string) bool { return conf.SameHeaderName(k, p) }) {
			delete(h, k)
		}
	}
}

// contentCoding returns the request's content codings other than
// identity, "" if none: every Content-Encoding field is read, since an
// origin applies them all.
func contentCoding(h http.Header) string {
	var codings []string
	for _, v := range h.Values("Content-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = textproto.TrimString(c); c != "" && !strings.EqualFold(c, "identity") {
				codings = append(codings, c)
			}
		}
	}
	return strings.Join(codings, ", ")
}

// dropConnectionFields removes the fields the client's Connection field
// names (RFC 9110, 7.6.1: they are of its hop only), but for the
// hop-by-hop fields the relay handles itself (Upgrade above all, which
// rules read): before the rules read the request, since the relay does
// not forward them, and an allow rule must not hold for a field the
// upstream never gets.
func dropConnectionFields(h http.Header) {
	for _, f := range h["Connection"] {
		for name := range strings.SplitSeq(f, ",") {
			name = textproto.TrimString(name)
			if name != "" && !slices.ContainsFunc(hopHeaders, func(hop string) bool { return strings.EqualFold(hop, name) }) {
				h.Del(name)
			}
		}
	}
}

// canonicalAuthority is the authority the upstream reads for a request
// whose authority checkAuthority passed: the session's host as policy
// names it (not "API.Example.com." or another spelling an origin could
// route elsewhere), with the port if the client gave one.
func canonicalAuthority(authority string, sess *Session) string {
	if _, port, err := net.SplitHostPort(authority); err == nil && port != "" {
		return net.JoinHostPort(sess.Name, port)
	}
	return sess.Name
}

// checkRequest says why a request may not be relayed whatever the rules,
// or "".
func checkRequest(r *http.Request, sess *Session) string {
	if r.Method == http.MethodConnect {
		return "CONNECT inside an inspected session"
	}
	if r.URL.Scheme != "" && r.URL.Scheme != "https" {
		return "absolute-form target with scheme " + logSafe(r.URL.Scheme)
	}
	if why := checkAuthority(r.Host, sess); why != "" {
		return why
	}
	if r.URL.Host != "" {
		if why := checkAuthority(r.URL.Host, sess); why != "" {
			return why
		}
	}
	// HTTP/2: a Host field beside :authority (net/http reads the
	// latter, and keeps the field) must name the same host (RFC 9113
	// 8.3.1).
	for _, v := range r.Header["Host"] {
		if why := checkAuthority(v, sess); why != "" {
			return why
		}
	}
	if up := r.Header.Get("Upgrade"); up != "" {
		if r.ProtoMajor != 1 || !strings.EqualFold(up, "websocket") {
			return "upgrade to " + logSafe(up) + " (only WebSocket)"
		}
	}
	return ""
}

// originForm is the request's target as the client sent it (the
// request line's, or HTTP/2's :path), in origin form: an absolute-form
// target ("https://host/path?q", whose authority checkRequest has
// checked) without its scheme and authority.
func originForm(r *http.Request) string {
	t := r.RequestURI
	if strings.HasPrefix(t, "/") {
		return t
	}
	scheme, rest, ok := strings.Cut(t, ":")
	if !ok || scheme == "" || strings.ContainsAny(scheme, "/?#") {
		return t // not absolute form: ParseTarget refuses it
	}
	if auth, ok := strings.CutPrefix(rest, "//"); ok {
		i := strings.IndexAny(auth, "/?#")
		if i < 0 {
			return "/"
		}
		rest = auth[i:]
	}
	if strings.HasPrefix(rest, "?") {
		return "/" + rest
	}
	return rest
}

// checkAuthority refuses an authority that is not the session's host on
// its port.
func checkAuthority(authority string, sess *Session) string {
	host, port := authority, ""
	if h, p, err := net.SplitHostPort(authority); err == nil {
		host, port = h, p
	}
	// The session's name is normalized, and normalizing it again
	// changes nothing: only another spelling needs the IDNA work.
	if host != sess.Name {
		name, err := conf.NormalizeName(host)
		if err != nil || name != sess.Name {
			return decisionlog.ReasonWrongAuthority + logSafe(authority)
		}
	}
	if port != "" && port != strconv.Itoa(int(sess.Dst.Port())) {
		return decisionlog.ReasonWrongAuthority + logSafe(authority) + " (another port)"
	}
	return ""
}

// writeRefusal answers a refused request: JSON when the request was JSON
// (or asked for it), plain text otherwise; both name the host, the rule
// and the sandbox.
func (s *Server) writeRefusal(w http.ResponseWriter, r *http.Request, host string, status int, rule, reason string) {
	msg := fmt.Sprintf("doorman: this request to %q is refused by the policy of sandbox %q", host, s.cfg.Sandbox)
	if rule != "" {
		msg += " (rule: " + rule + ")"
	}
	if reason != "" {
		msg += ": " + reason
	}
	h := w.Header()
	h.Set("X-Doorman-Sandbox", s.cfg.Sandbox)
	h.Set("Cache-Control", "no-store")
	if r.ProtoMajor == 1 {
		h.Set("Connection", "close")
	}
	if wantsJSON(r) {
		h.Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]any{
			"type": "error",
			"error": map[string]any{
				"type": "doorman_policy", "message": msg, "host": host, "rule": rule, "sandbox": s.cfg.Sandbox, "reason": reason,
			},
		})
		return
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, msg+"\n")
}

func wantsJSON(r *http.Request) bool {
	for _, v := range []string{r.Header.Get("Content-Type"), r.Header.Get("Accept")} {
		for part := range strings.SplitSeq(v, ",") {
			mt, _, err := mime.ParseMediaType(strings.TrimSpace(part))
			if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
				return true
			}
		}
	}
	return false
}

// logSafe bounds what a client chose before it reaches a log line.
func logSafe(s string) string {
	const max = 512
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strings.ToValidUTF8(s, "?")
}

// statusWriter remembers the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 || (w.status >= 100 && w.status < 200) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController find the Flusher and Hijacker.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush passes a flush on (ReverseProxy flushes streamed bodies).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// countingBody counts what is read through it.
type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// Write passes writes through to a body that takes them: an upgraded
// WebSocket connection's upstream side.
func (b *countingBody) Write(p []byte) (int, error) {
	if w, ok := b.ReadCloser.(io.Writer); ok {
		return w.Write(p)
	}
	return 0, errors.New("body is not writable")
}
