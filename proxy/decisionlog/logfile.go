package decisionlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// RotatedSuffix names the one rotated file a LogFile keeps: the log at
// path rotates to path+RotatedSuffix. ReadFile and CountFile read it
// before the log itself.
const RotatedSuffix = ".1"

// retryAfterFailure is how long a LogFile drops lines after a write
// failed before it tries the disk again: a full disk costs the proxy one
// failed write a second, not one a line.
const retryAfterFailure = time.Second

// LogFile is the decision log's file as its one writer, the sandbox's
// proxy, holds it. It appends; at MaxSize it rotates the file to
// path+RotatedSuffix (replacing the previous one) and starts a new one, so
// a sandbox's log takes at most twice MaxSize of disk. Follow and
// WaitPolicy go on across a rotation.
//
// A write that fails (a full disk, a quota) never fails or slows the
// proxy: the line is dropped and counted, and for a second every line is
// dropped without trying. The first line written once writing works again
// is a MsgLogDropped line that says how many were dropped, when, and why.
// Write always reports success: slog would drop the error anyway, and
// enforcement must not depend on its log.
type LogFile struct {
	path    string
	maxSize int64
	sandbox string

	mu        sync.Mutex
	f         *os.File
	size      int64
	partial   bool // a failed write may have left part of a line
	dropped   int64
	firstDrop time.Time
	lastDrop  time.Time
	dropErr   error
	retryAt   time.Time // no write before this, after a failure
	rotateAt  time.Time // no rotation before this, after one failed
}

// OpenLogFile opens (creating it, mode 0640) the log at path for
// appending, rotating it at maxSize bytes (0: never). sandbox names the
// sandbox in the line a LogFile writes itself.
func OpenLogFile(path string, maxSize int64, sandbox string) (*LogFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("decision log: %w", err)
	}
	l := &LogFile{path: path, maxSize: maxSize, sandbox: sandbox, f: f}
	if fi, err := f.Stat(); err == nil {
		l.size = fi.Size()
	}
	return l, nil
}

// Write appends p, one line (slog writes each record in one call), and
// returns len(p), nil: see LogFile for what happens when it cannot.
func (l *LogFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if l.dropped > 0 && now.Before(l.retryAt) {
		l.drop(now, nil)
		return len(p), nil
	}
	if l.maxSize > 0 && l.size > 0 && l.size+int64(len(p)) > l.maxSize && !now.Before(l.rotateAt) {
		l.rotate(now)
	}
	if l.dropped > 0 {
		if err := l.write(l.droppedLine(now)); err != nil {
			l.drop(now, err)
			return len(p), nil
		}
		l.dropped, l.dropErr = 0, nil
	}
	if err := l.write(p); err != nil {
		l.drop(now, err)
	}
	return len(p), nil
}

// Dropped returns how many lines were dropped since writing last worked.
func (l *LogFile) Dropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// Close closes the file. Lines still counted as dropped stay unwritten.
func (l *LogFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Close()
}

// write appends b to the file, after a newline that ends the part of a
// line a failed write left.
func (l *LogFile) write(b []byte) error {
	if l.partial {
		b = append([]byte{'\n'}, b...)
	}
	n, err := l.f.Write(b)
	l.size += int64(n)
	if err != nil {
		l.partial = l.partial || n > 0
		return err
	}
	l.partial = false
	return nil
}

// drop counts one dropped line; err, if not nil, is why the disk refused
// it, and starts a second without tries.
func (l *LogFile) drop(now time.Time, err error) {
	if l.dropped == 0 {
		l.firstDrop = now
	}
	l.dropped++
	l.lastDrop = now
	if err != nil {
		l.dropErr = err
		l.retryAt = now.Add(retryAfterFailure)
	}
}

// droppedLine is the MsgLogDropped line for the lines dropped so far.
func (l *LogFile) droppedLine(now time.Time) []byte {
	var buf bytes.Buffer
	h := slog.NewJSONHandler(&buf, nil)
	r := slog.NewRecord(now, slog.LevelWarn, MsgLogDropped, 0)
	errText := ""
	if l.dropErr != nil {
		errText = l.dropErr.Error()
	}
	r.AddAttrs(
		slog.String(SandboxKey, l.sandbox),
		slog.Int64(DroppedLinesKey, l.dropped),
		slog.Time(FirstKey, l.firstDrop),
		slog.Time(LastKey, l.lastDrop),
		slog.String(ErrKey, errText),
	)
	h.Handle(context.Background(), r)
	return buf.Bytes()
}

// rotate renames the log to its rotated name and opens a new one. If it
// cannot, the proxy goes on writing where it was, and tries again in a
// second.
func (l *LogFile) rotate(now time.Time) {
	err := os.Rename(l.path, l.path+RotatedSuffix)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		l.rotateAt = now.Add(retryAfterFailure)
		return
	}
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		// The old file is the rotated one now; it takes the lines until
		// a new one can be made.
		l.rotateAt = now.Add(retryAfterFailure)
		return
	}
	l.f.Close()
	l.f, l.size, l.partial = f, 0, false
}
