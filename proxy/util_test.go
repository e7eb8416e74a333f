package proxy

import (
	"context"
	"crypto/tls"
	"net"
	"syscall"
	"testing"
	"time"
)

var netErrReset = syscall.ECONNRESET

func contextWithCancel() (context.Context, context.CancelFunc) {
	return context.WithCancel(context.Background())
}

// captureHello returns the exact TLS record(s) Go's default client sends
// first for serverName.
func captureHello(t *testing.T, serverName string) []byte {
	t.Helper()
	client, server := net.Pipe()
	defer server.Close()
	go func() {
		tc := tls.Client(client, &tls.Config{ServerName: serverName})
		tc.SetDeadline(time.Now().Add(2 * time.Second))
		tc.Handshake()
		client.Close()
	}()
	var out []byte
	hdr := make([]byte, 5)
	server.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := ioReadFull(server, hdr); err != nil {
		t.Fatal(err)
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	body := make([]byte, n)
	if _, err := ioReadFull(server, body); err != nil {
		t.Fatal(err)
	}
	out = append(append(out, hdr...), body...)
	return out
}

// splitRecords re-frames a single-record hello into records of size bytes of handshake data each.
func splitRecords(rec []byte, size int) []byte {
	payload := rec[5:]
	var out []byte
	for i := 0; i < len(payload); i += size {
		chunk := payload[i:min(i+size, len(payload))]
		out = append(out, rec[0], rec[1], rec[2], byte(len(chunk)>>8), byte(len(chunk)))
		out = append(out, chunk...)
	}
	return out
}

func ioReadFull(c net.Conn, b []byte) (int, error) {
	n := 0
	for n < len(b) {
		m, err := c.Read(b[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}
