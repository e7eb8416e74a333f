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

	// Batching (see Batch): lines not written yet, how many, and the
	// timer that writes them.
	delay        time.Duration
	pending      []byte
	pendingLines int64
	timer        *time.Timer
	armed        bool
}

// maxBatch is how many bytes of lines a batching LogFile gathers before it
// writes them without waiting for its delay.
const maxBatch = 64 << 10

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
		l.drop(now, nil, 1)
		return len(p), nil
	}
	if size := l.size + int64(len(l.pending)); l.maxSize > 0 && size > 0 && size+int64(len(p)) > l.maxSize && !now.Before(l.rotateAt) {
		// The lines gathered so far still belong to this file.
		l.flushLocked(now)
		l.rotate(now)
	}
	if l.delay <= 0 {
		l.emit(now, p, 1)
		return len(p), nil
	}
	l.pending = append(l.pending, p...)
	l.pendingLines++
	switch {
	case len(l.pending) >= maxBatch:
		l.flushLocked(now)
	case !l.armed:
		l.armed = true
		if l.timer == nil {
			l.timer = time.AfterFunc(l.delay, l.Flush)
		} else {
			l.timer.Reset(l.delay)
		}
	}
	return len(p), nil
}

// Batch makes l gather the lines it is given and write them together, at
// most delay after the first of them, or as soon as 64 KiB wait, and at
// Flush and Close: one write(2) for many connections' lines rather than
// one each, off the connections' path. A process that is killed loses
// the lines of its last delay. Call it before the first Write.
func (l *LogFile) Batch(delay time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.delay = delay
}

// Flush writes the lines gathered so far.
func (l *LogFile) Flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked(time.Now())
}

func (l *LogFile) flushLocked(now time.Time) {
	l.armed = false
	if len(l.pending) == 0 {
		return
	}
	if l.dropped > 0 && now.Before(l.retryAt) {
		l.drop(now, nil, l.pendingLines)
	} else {
		l.emit(now, l.pending, l.pendingLines)
	}
	if cap(l.pending) > 2*maxBatch {
		l.pending = nil // an idle proxy keeps no large buffer
	} else {
		l.pending = l.pending[:0]
	}
	l.pendingLines = 0
}

// emit writes b, lines lines, after the line that says how many were
// dropped before, if any were.
func (l *LogFile) emit(now time.Time, b []byte, lines int64) {
	if l.dropped > 0 {
		if err := l.write(l.droppedLine(now)); err != nil {
			l.drop(now, err, lines)
			return
		}
		l.dropped, l.dropErr = 0, nil
	}
	if err := l.write(b); err != nil {
		l.drop(now, err, lines)
	}
}

// Dropped returns how many lines were dropped since writing last worked.
func (l *LogFile) Dropped() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// Close writes the lines gathered so far and closes the file. Lines
// counted as dropped stay unwritten.
func (l *LogFile) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.flushLocked(time.Now())
	if l.timer != nil {
		l.timer.Stop()
	}
	l.delay = 0
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

// drop counts lines dropped lines; err, if not nil, is why the disk
// refused them, and starts a second without tries.
func (l *LogFile) drop(now time.Time, err error, lines int64) {
	if l.dropped == 0 {
		l.firstDrop = now
	}
	l.dropped += lines
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
