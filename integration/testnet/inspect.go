package testnet

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"time"
)

// Paths every Host's servers answer for tests of request-level rules.
const (
	// HeadersPath answers with the request's headers as a JSON object
	// (canonical name to values) and the body's length.
	HeadersPath = "/dm/headers"
	// HeaderDigestsPath answers with the SHA-256 (hex) of every value
	// of every request header, as a JSON object (canonical name to
	// digests): a client proves which credential reached the server
	// without ever holding it.
	HeaderDigestsPath = "/dm/header-digests"
	// StreamPath answers with server-sent events: "data: first" at
	// once, "data: last" only once ReleaseStreams is called (or after
	// a minute), so that a client that sees the first event before the
	// last proves nothing buffered the stream on the way.
	StreamPath = "/dm/stream"
	// EchoWebSocketPath accepts a WebSocket handshake and then echoes
	// whatever bytes come, unframed: the relay, not WebSocket, is tested.
	EchoWebSocketPath = "/dm/ws"
)

// streamTimeout bounds how long StreamPath waits for ReleaseStreams.
const streamTimeout = time.Minute

// ReleaseStreams lets every response of StreamPath waiting now, or
// starting within a minute, finish.
func (h *Host) ReleaseStreams() {
	h.streamOnce.Do(func() { close(h.streamRelease) })
}

// serveInspectPaths answers the paths above; false for any other.
func (h *Host) serveInspectPaths(w http.ResponseWriter, r *http.Request) bool {
	switch r.URL.Path {
	case HeadersPath:
		n, _ := io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"headers": r.Header, "bodyBytes": n, "proto": r.Proto, "host": r.Host})
	case HeaderDigestsPath:
		io.Copy(io.Discard, r.Body)
		digests := map[string][]string{}
		for name, values := range r.Header {
			for _, v := range values {
				sum := sha256.Sum256([]byte(v))
				digests[name] = append(digests[name], hex.EncodeToString(sum[:]))
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"digests": digests})
	case StreamPath:
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, "data: first\n\n")
		http.NewResponseController(w).Flush()
		select {
		case <-h.streamRelease:
		case <-time.After(streamTimeout):
		case <-r.Context().Done():
			return true
		}
		io.WriteString(w, "data: last\n\n")
	case EchoWebSocketPath:
		if r.ProtoMajor != 1 || !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
			http.Error(w, "want a WebSocket handshake", http.StatusBadRequest)
			return true
		}
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return true
		}
		defer conn.Close()
		rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n")
		rw.Flush()
		conn.SetDeadline(time.Now().Add(30 * time.Second))
		buf := make([]byte, 4096)
		for {
			n, err := rw.Read(buf)
			if n > 0 {
				conn.Write(buf[:n])
			}
			if err != nil {
				return true
			}
		}
	default:
		return false
	}
	return true
}
