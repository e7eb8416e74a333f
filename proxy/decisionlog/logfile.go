package decisionlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// RotatedSuffix names the one rotated file a LogFile keeps: the log at
// path rotates to path+RotatedSuffix. ReadFile and CountFile read it
// before the log itself.
const RotatedSuffix = ".1"

// retryAfterFailure is how long a LogFile drops lines after a write
// failed before it tries the disk again: a full disk costs the proxy one
// failed write a second, not one a line.
const retryAfterFailure = time.Second

// A line is written with a raw write(2), without the Go runtime's
// system-call bookkeeping, while such writes are quick. A proxy runs with
// one P, and parks it whenever it has nothing to do; the runtime's
// monitor thread then sleeps deeply, and every system call made through
// the runtime wakes it to watch the call (a futex wake, and its own
// sleeps until the P is idle again): measured on the TLS connection rows,
// two of the proxy's six or seven context switches a connection, and
// about a tenth of its CPU time. The price of the raw call is that the P
// stays with the thread for as long as the write takes, so every other
// goroutine of the proxy (the relay loop among them) waits for it, where
// the runtime would have handed the P on after 20 µs. So a raw write
// that slept in the kernel (its thread made a voluntary context switch
// during it: the disk throttles writers, the cgroup reclaims memory, the
// journal is full) and took longer than rawWriteMax sends the writes
// through the runtime for a while: rawWritePause, doubled for each such
// write within rawWritePauseMax of the end of the previous pause, up to
// rawWritePauseMax (a disk that throttles its writers keeps them off the
// P; a journal commit that made one write wait does not send every line
// through the runtime for long); and files on anything but a
// local filesystem are always written through it. A write that took long
// only because its thread waited for a CPU (on a busy machine, the usual
// reason) does not count: the runtime's handoff would not have helped the
// proxy's other goroutines, which wait for the same CPU, and through the
// runtime every line would cost the wakes above. Before issue 29's second
// pass any write slower than rawWriteMax counted, so on a loaded machine the proxy wrote
// through the runtime most of the time.
const (
	rawWriteMax      = time.Millisecond
	rawWritePause    = time.Second
	rawWritePauseMax = time.Minute
)

// localFilesystems are the filesystems (statfs f_type) whose files a
// LogFile may write with a raw write(2): local ones, where an append to
// the page cache takes microseconds.
var localFilesystems = map[int64]bool{
	0xef53:     true, // ext2, ext3 and ext4
	0x58465342: true, // xfs
	0x9123683e: true, // btrfs
	0x01021994: true, // tmpfs
	0x794c7630: true, // overlayfs
	0xf2f52010: true, // f2fs
}

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
	// fd is f's descriptor if f may be written with a raw write(2),
	// else -1; rawAfter: not before this (a raw write was slow);
	// rawPause: the pause after the last slow raw write.
	fd       int
	rawAfter time.Time
	rawPause time.Duration
	// writeRaw is rawWrite (a test's stand-in).
	writeRaw func(fd int, b []byte) (int, error)
}

// OpenLogFile opens (creating it, mode 0640) the log at path for
// appending, rotating it at maxSize bytes (0: never). sandbox names the
// sandbox in the line a LogFile writes itself.
func OpenLogFile(path string, maxSize int64, sandbox string) (*LogFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("decision log: %w", err)
	}
	l := &LogFile{path: path, maxSize: maxSize, sandbox: sandbox, f: f, writeRaw: rawWrite}
	if fi, err := f.Stat(); err == nil {
		l.size = fi.Size()
	}
	l.fd = rawFD(f)
	return l, nil
}

// rawFD returns f's descriptor if f is on a local filesystem (see
// localFilesystems), else -1.
func rawFD(f *os.File) int {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1
	}
	fd := -1
	rc.Control(func(s uintptr) {
		var st syscall.Statfs_t
		if syscall.Fstatfs(int(s), &st) == nil && localFilesystems[int64(st.Type)] {
			fd = int(s)
		}
	})
	return fd
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

// Quick reports whether the next line would most likely be written at
// once with a raw write(2): the file is on a local filesystem, no slow
// write paused raw writes, no line waits to be retried after a failure,
// and no other goroutine is writing (l's lock is free). A caller that may
// not wait for the disk writes its line only when Quick is true.
func (l *LogFile) Quick() bool {
	if !l.mu.TryLock() {
		return false
	}
	defer l.mu.Unlock()
	return l.fd >= 0 && l.dropped == 0 && !time.Now().Before(l.rawAfter)
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
	n, err := l.writeFile(b)
	l.size += int64(n)
	if err != nil {
		l.partial = l.partial || n > 0
		return err
	}
	l.partial = false
	return nil
}

// writeFile writes b to the file: with a raw write(2) while those are
// quick, else through the runtime (see rawWriteMax).
func (l *LogFile) writeFile(b []byte) (int, error) {
	if l.fd < 0 {
		return l.f.Write(b)
	}
	start := time.Now()
	if start.Before(l.rawAfter) {
		return l.f.Write(b)
	}
	// The thread's voluntary context switches before and after tell
	// whether the write slept; the goroutine stays on its thread
	// meanwhile, so that both counts are the same thread's.
	runtime.LockOSThread()
	before, beforeErr := threadSleeps()
	n, err := l.writeRaw(l.fd, b)
	if time.Since(start) > rawWriteMax {
		after, afterErr := threadSleeps()
		if beforeErr != nil || afterErr != nil || after != before {
			now := time.Now()
			if l.rawPause == 0 || now.Sub(l.rawAfter) > rawWritePauseMax {
				l.rawPause = rawWritePause
			} else {
				l.rawPause = min(2*l.rawPause, rawWritePauseMax)
			}
			l.rawAfter = now.Add(l.rawPause)
		}
	}
	runtime.UnlockOSThread()
	n = max(n, 0)
	switch {
	case err == syscall.EINTR, err == nil && n < len(b):
		// What is left goes through the runtime, which retries.
		m, err := l.f.Write(b[n:])
		return n + m, err
	case err != nil:
		return n, &os.PathError{Op: "write", Path: l.f.Name(), Err: err}
	}
	return n, nil
}

// rusageThread is getrusage(2)'s RUSAGE_THREAD.
const rusageThread = 1

// threadSleeps returns how many times the calling thread has slept
// (voluntary context switches), with a raw getrusage(2): through the
// runtime it would wake the monitor thread the raw write avoids.
func threadSleeps() (int64, error) {
	var ru syscall.Rusage
	_, _, e := syscall.RawSyscall(syscall.SYS_GETRUSAGE, rusageThread, uintptr(unsafe.Pointer(&ru)), 0)
	if e != 0 {
		return 0, e
	}
	return ru.Nvcsw, nil
}

// rawWrite is write(2) without the runtime's system-call bookkeeping (see
// rawWriteMax).
func rawWrite(fd int, b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)))
	if e != 0 {
		return 0, e
	}
	return int(r), nil
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
	l.fd = rawFD(f)
}
