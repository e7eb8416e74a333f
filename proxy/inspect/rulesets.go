package inspect

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// RuleSetMaxBody is how much of a request body the proxy reads to judge
// it by a rule set, when the host sets no larger max-body: 32 MiB, the
// largest request the providers take (a model request with images
// outgrows the 1 MiB of a host's own body rules).
const RuleSetMaxBody = 32 << 20

// setRecord is what the rule sets did with one request, for its line.
type setRecord struct {
	refs     string // "closed-book@1 strip, ..."
	tools    []string
	removed  []string
	declared []string
	// tw scans the response (nil: nothing to scan).
	ev    *conf.EvidenceMatcher
	probe bool
	tw    *tripwire
}

// logFields fills a decision line's rule set fields.
func (sr *setRecord) logFields(l *decisionlog.Request) {
	if sr == nil {
		return
	}
	l.RuleSet = sr.refs
	l.Tools, l.Removed, l.Declared = sr.tools, sr.removed, sr.declared
	if sr.tw != nil {
		l.Evidence = sr.tw.seen
	}
}

// sessionSets are the rule sets in force for a session's host under one
// policy, resolved once for all the session's requests (while the
// policy stays the one in force).
type sessionSets struct {
	pol  *conf.Policy
	sets []conf.ActiveRuleSet // read only
	// refs names the sets and their actions for the log; ev is their
	// evidence, compiled; enforce: some set does more than probe.
	refs    string
	ev      *conf.EvidenceMatcher
	enforce bool
}

// setsFor returns the rule sets in force for sc's host under pol.
func (sc *sessionConn) setsFor(pol *conf.Policy) *sessionSets {
	if ss := sc.sets.Load(); ss != nil && ss.pol == pol {
		return ss
	}
	ss := &sessionSets{pol: pol, sets: pol.RuleSetsFor(sc.s.Name)}
	refs := make([]string, len(ss.sets))
	for i := range ss.sets {
		refs[i] = ss.sets[i].RefAction()
		ss.enforce = ss.enforce || ss.sets[i].Action != conf.SetProbe
	}
	ss.refs = strings.Join(refs, ", ")
	if len(ss.sets) == 1 {
		ss.ev = ss.sets[0].Matcher()
	} else {
		var evidence []conf.SetEvidence
		for i := range ss.sets {
			evidence = append(evidence, ss.sets[i].Evidence()...)
		}
		ss.ev = conf.NewEvidenceMatcher(evidence)
	}
	sc.sets.Store(ss)
	return ss
}

// applyRuleSets judges a request by the rule sets in force for its host
// (after the host's own rules passed it): it refuses what a set refuses,
// removes what a set in strip mode removes (the request then carries the
// rewritten body), and arms the response tripwire. false means the
// request was refused and answered.
func (s *Server) applyRuleSets(w http.ResponseWriter, r *http.Request, sc *sessionConn, h *conf.InspectHost, req *conf.Request, rec *requestRecord, hold *bodyHold) bool {
	sess := sc.s
	ss := sc.setsFor(s.cfg.Policy())
	sets := ss.sets
	if len(sets) == 0 {
		return true
	}
	sr := &setRecord{refs: ss.refs}
	rec.sets = sr
	ev, enforce := ss.ev, ss.enforce
	refuse := func(status int, rule, reason, tool string) bool {
		rec.verdict, rec.rule, rec.reason, rec.status = decisionlog.Deny, rule, reason, status
		s.writeSetRefusal(w, r, sess.Name, status, rule, reason, tool)
		return false
	}
	need := false
	for i := range sets {
		need = need || sets[i].NeedsBody(req)
	}
	if need && req.Body == nil {
		limit := max(h.BodyLimit(), RuleSetMaxBody)
		done := s.watchIdle(w, r)
		body, why, status := readSetBody(r, limit, hold)
		done()
		if status == http.StatusServiceUnavailable {
			w.Header().Set("Retry-After", "1")
		}
		if why != "" {
			return refuse(status, "ruleset "+sets[0].Set.Ref(), why, "")
		}
		req.Body = body
		setBody(r, body)
		rec.up.Store(int64(len(body)))
	}
	if len(req.Body) > 0 {
		// What judging the body costs grows with its objects and
		// arrays: the judgements in flight share one bound (a body at
		// the most a set reads is judged alone), and wait their turn.
		w := int64(conf.JSONContainerBound(req.Body))
		if err := s.judging.Acquire(r.Context(), w); err != nil {
			return refuse(http.StatusServiceUnavailable, "ruleset "+sets[0].Set.Ref(), "waiting to judge the body: "+err.Error(), "")
		}
		defer s.judging.Release(w)
	}
	for i := range sets {
		a := &sets[i]
		j := a.Judge(req)
		for _, f := range j.Findings {
			sr.tools = appendOnce(sr.tools, logSafe(f.String()))
		}
		for _, d := range j.Inventory {
			sr.declared = appendOnce(sr.declared, logSafe(d))
		}
		if j.Verdict == conf.VerdictDeny {
			tool := ""
			for _, f := range j.Findings {
				if f.Line == j.Rule {
					tool = f.ID
					if j.Reason == "" {
						j.Reason = "the request asks for " + logSafe(f.String())
					}
					break
				}
			}
			if j.Spelling != "" {
				j.Reason += " (matched another spelling of the request: " + j.Spelling + ")"
				j.Reason = strings.TrimPrefix(j.Reason, " ")
			}
			rule := "ruleset " + a.Set.Ref()
			if j.Rule != "" {
				rule += ": " + j.Rule
			}
			return refuse(http.StatusForbidden, rule, j.Reason, tool)
		}
		if j.Body != nil {
			hold.take(int64(cap(j.Body))) // made already: counted if the bound has room
			for _, f := range j.Removed {
				sr.removed = appendOnce(sr.removed, logSafe(f.String()))
			}
			req.Body = j.Body
			setBody(r, j.Body)
			rec.up.Store(int64(len(j.Body)))
		}
	}
	if ev != nil {
		sr.ev, sr.probe = ev, !enforce
		// What the tripwire reads must be what the client gets: no
		// content coding it would have to undo.
		r.Header.Set("Accept-Encoding", "identity")
	}
	return true
}

// setBody makes body the request's, as it is forwarded: its length
// known, no content coding left.
func setBody(r *http.Request, body []byte) {
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	r.Header.Del("Content-Encoding")
	r.Header.Del("Content-Length")
}

// readSetBody reads a request's body for a rule set, up to limit bytes,
// undoing a gzip or deflate content coding (the body is then forwarded
// decoded, its Content-Encoding dropped): what is judged is what the
// host gets. Another coding (br, zstd) is refused. why says why the
// body could not be read, with the status to answer.
func readSetBody(r *http.Request, limit int64, hold *bodyHold) (body []byte, why string, status int) {
	if r.ContentLength > limit {
		return nil, fmt.Sprintf("%s (%d bytes, limit %d)", decisionlog.ReasonBodyTooLarge, r.ContentLength, limit), http.StatusRequestEntityTooLarge
	}
	raw, err := readUpTo(r.Body, r.ContentLength, limit, hold)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return nil, "the body stalled: no byte within the idle timeout while it was read to be judged", http.StatusRequestTimeout
	}
	if errors.Is(err, errBodiesHeld) {
		return nil, err.Error(), http.StatusServiceUnavailable
	}
	if err != nil {
		return nil, "reading the body: " + err.Error(), http.StatusBadRequest
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Sprintf("%s (limit %d)", decisionlog.ReasonBodyTooLarge, limit), http.StatusRequestEntityTooLarge
	}
	codings := r.Header.Values("Content-Encoding")
	var list []string
	for _, v := range codings {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" && c != "identity" {
				list = append(list, c)
			}
		}
	}
	// Codings were applied in order: undo them last first.
	for i := len(list) - 1; i >= 0; i-- {
		var dec io.Reader
		switch list[i] {
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(bytes.NewReader(raw))
			if err != nil {
				return nil, "the gzip body does not decode: " + err.Error(), http.StatusBadRequest
			}
			dec = zr
		case "deflate":
			// RFC 9110: the zlib format; some clients send raw
			// deflate, which zlib refuses.
			if zr, err := zlib.NewReader(bytes.NewReader(raw)); err == nil {
				dec = zr
			} else {
				dec = flate.NewReader(bytes.NewReader(raw))
			}
		default:
			return nil, "a rule set reads the body and its content coding " + logSafe(list[i]) +
				" is not one doorman decodes (gzip, deflate)", http.StatusUnsupportedMediaType
		}
		out, err := readUpTo(dec, -1, limit, hold)
		if errors.Is(err, errBodiesHeld) {
			return nil, err.Error(), http.StatusServiceUnavailable
		}
		if err != nil {
			return nil, "the " + list[i] + " body does not decode: " + err.Error(), http.StatusBadRequest
		}
		if int64(len(out)) > limit {
			return nil, fmt.Sprintf("%s (decoded, limit %d)", decisionlog.ReasonBodyTooLarge, limit), http.StatusRequestEntityTooLarge
		}
		raw = out
	}
	return raw, "", 0
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	if len(list) >= 64 {
		return list
	}
	return append(list, s)
}

// writeSetRefusal answers a request a rule set refused: writeRefusal's
// answer, which also names the tool, so that an agent sees a tool error.
func (s *Server) writeSetRefusal(w http.ResponseWriter, r *http.Request, host string, status int, rule, reason, tool string) {
	if !wantsJSON(r) {
		s.writeRefusal(w, r, host, status, rule, reason)
		return
	}
	msg := fmt.Sprintf("doorman: this request to %q is refused by the policy of sandbox %q (rule: %s)", host, s.cfg.Sandbox, rule)
	if reason != "" {
		msg += ": " + reason
	}
	hd := w.Header()
	hd.Set("X-Doorman-Sandbox", s.cfg.Sandbox)
	hd.Set("Cache-Control", "no-store")
	if r.ProtoMajor == 1 {
		hd.Set("Connection", "close")
	}
	hd.Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{
		"type": "error",
		"error": map[string]any{
			"type": "doorman_policy", "message": msg, "host": host, "rule": rule, "sandbox": s.cfg.Sandbox,
			"reason": reason, "tool": tool,
		},
	})
}

// armTripwire wraps a response body in the tripwire when the request's
// rule sets have evidence to look for. A response that is content-coded
// although identity was asked for cannot be scanned as it streams: it is
// refused (nil, reason) unless the sets only probe.
func (sr *setRecord) armTripwire(resp *http.Response) (io.ReadCloser, string) {
	if sr == nil || sr.ev == nil {
		return resp.Body, ""
	}
	kind := tripKindOf(resp)
	if kind == tripNone {
		return resp.Body, ""
	}
	if ce := resp.Header.Get("Content-Encoding"); ce != "" && !strings.EqualFold(ce, "identity") {
		if sr.probe {
			return resp.Body, ""
		}
		return nil, "the response is content-coded (" + logSafe(ce) + ") although doorman asked for identity: the tripwire cannot read it"
	}
	sr.tw = newTripwire(resp.Body, kind, sr.ev, sr.probe)
	return sr.tw, ""
}

// readWhole reads a JSON response of known length, up to maxEvent,
// whole through the tripwire before any of it is sent: evidence in it
// then refuses the response cleanly (tripped), instead of cutting it.
// Other responses are returned as they are, to stream.
func (sr *setRecord) readWhole(resp *http.Response, body io.ReadCloser) (out io.ReadCloser, tripped bool, err error) {
	if sr == nil || sr.tw == nil || sr.tw.kind != tripJSON || resp.ContentLength < 0 || resp.ContentLength > maxEvent {
		return body, false, nil
	}
	data := sr.tw.whole[:0]
	if int64(cap(data)) < resp.ContentLength+1 {
		data = make([]byte, 0, resp.ContentLength+1)
	}
	for {
		n, rerr := sr.tw.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if rerr == io.EOF {
			err = nil
			break
		}
		if err = rerr; err != nil {
			break
		}
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
	sr.tw.whole = data // the tripwire's again once the response is sent
	if errors.Is(err, errTripped) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return io.NopCloser(bytes.NewReader(data)), false, nil
}

// release returns the record's tripwire to its pool once the request's
// decision line is written: nothing reads the tripwire, or the answer
// it read whole, after that.
func (sr *setRecord) release() {
	if sr != nil && sr.tw != nil {
		releaseTripwire(sr.tw)
		sr.tw = nil
	}
}

// reason says why the tripwire refused or cut a response, and sets the
// record's verdict, rule and reason.
func (sr *setRecord) reason(rec *requestRecord) string {
	tw := sr.tw
	reason := tw.why
	if len(tw.seen) > 0 {
		reason = decisionlog.ReasonEvidence + strings.Join(tw.seen, ", ")
	}
	rec.verdict, rec.reason = decisionlog.Deny, reason
	if len(tw.lines) > 0 {
		rec.rule = "ruleset " + sr.refs + ": " + tw.lines[0]
	}
	return reason
}

// tripped finishes a response the tripwire cut: an event stream gets a
// last event naming why (an error event the vendors' clients raise),
// and the decision line says deny.
func (sr *setRecord) tripped(w http.ResponseWriter, rec *requestRecord, sandbox string) {
	tw := sr.tw
	reason := sr.reason(rec)
	if tw.kind != tripSSE {
		return
	}
	data, _ := json.Marshal(map[string]any{
		"type": "error",
		"error": map[string]any{
			"type": "doorman_policy", "sandbox": sandbox, "rule": rec.rule, "reason": reason,
			"message": "doorman: the response was cut: " + reason,
		},
	})
	io.WriteString(w, "event: error\ndata: "+string(data)+"\n\n")
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}
