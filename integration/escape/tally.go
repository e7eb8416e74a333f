package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
)

// tally collects what one attempt did: the bytes it handed to the kernel,
// what failed and what it saw.
type tally struct {
	sent   int
	errs   []string
	detail []string
}

// wrote counts n bytes sent.
func (t *tally) wrote(n int) {
	if n > 0 {
		t.sent += n
	}
}

// fail records err as the outcome of what.
func (t *tally) fail(what string, err error) {
	t.errs = append(t.errs, what+": "+describe(err))
}

// note records an observation.
func (t *tally) note(format string, a ...any) {
	t.detail = append(t.detail, fmt.Sprintf(format, a...))
}

func (t *tally) row(attempt string) row {
	return row{Attempt: attempt, SentBytes: t.sent, Error: strings.Join(t.errs, "; "), Detail: strings.Join(t.detail, "; ")}
}

// describe shortens err to what a reader of the table needs: the errno's
// text where there is one (connection refused, operation not permitted…).
func describe(err error) string {
	var errno syscall.Errno
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, io.EOF):
		return "closed by peer"
	case errors.Is(err, os.ErrDeadlineExceeded):
		return "timed out"
	case errors.As(err, &errno):
		return errno.Error()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out"
	}
	return err.Error()
}

// payload is a recognisable message carrying a random token, as a workload
// exfiltrating a secret would send.
func payload(attempt string) []byte {
	return []byte(fmt.Sprintf("doorman-escape %s secret=%s\n", attempt, randomHex(8)))
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
