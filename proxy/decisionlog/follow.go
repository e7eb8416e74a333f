package decisionlog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// followPoll is how often Follow looks for new lines.
const followPoll = 100 * time.Millisecond

// Follow calls fn with every decision line written to the log at path
// from offset on, until ctx is done (it then returns nil) or fn fails. It
// waits for a log that does not exist yet, and when the file is truncated
// or replaced (rotated) it goes on from the start of the file now there.
func Follow(ctx context.Context, path string, offset int64, fn func(Decision) error) error {
	return followLines(ctx, path, offset, followPoll, func(b []byte) error {
		if d, ok := Parse(b); ok {
			return fn(d)
		}
		return nil
	})
}

// followLines calls fn with every line written to path from offset on,
// looking every poll, until ctx is done (nil) or fn fails.
func followLines(ctx context.Context, path string, offset int64, poll time.Duration, fn func([]byte) error) error {
	t := &tail{path: path, pos: offset, start: offset}
	defer t.close()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if err := t.poll(fn); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// tail is the state of one Follow.
type tail struct {
	path    string
	file    *os.File
	pos     int64  // offset in file of the end of partial
	partial []byte // bytes read after the last newline
	start   int64  // the offset the follow started from
}

func (t *tail) close() {
	if t.file != nil {
		t.file.Close()
	}
}

// poll reads what was appended since the last poll.
func (t *tail) poll(fn func([]byte) error) error {
	if t.file == nil {
		f, err := os.Open(t.path)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("follow %s: %w", t.path, err)
		}
		t.file = f
		if fi, err := f.Stat(); err == nil && fi.Size() < t.pos {
			// The offset belongs to an older file: the one rotated
			// since it was taken, if that is as long, whose rest
			// comes first.
			t.pos = 0
			if err := t.drainRotated(fn); err != nil {
				return err
			}
		}
	}
	if err := t.read(fn); err != nil {
		return err
	}
	// Rotated or truncated: drain what the old file got, then start over.
	cur, err := t.file.Stat()
	if err != nil {
		return fmt.Errorf("follow %s: %w", t.path, err)
	}
	now, err := os.Stat(t.path)
	switch {
	case err == nil && !os.SameFile(cur, now):
		t.close()
		t.file, t.pos, t.partial = nil, 0, nil
	case err == nil && now.Size() < t.pos:
		t.pos, t.partial = 0, nil
	}
	return nil
}

// drainRotated hands on the lines of the rotated file (path+RotatedSuffix)
// after the offset the follow was asked to start from, if that file is at
// least that long: the log was rotated between the moment the caller took
// the offset and the first poll.
func (t *tail) drainRotated(fn func([]byte) error) error {
	f, err := os.Open(t.path + RotatedSuffix)
	if err != nil {
		return nil
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || fi.Size() < t.start {
		return nil
	}
	old := &tail{path: t.path, file: f, pos: t.start}
	if err := old.read(fn); err != nil {
		return err
	}
	return nil
}

// read reads from pos to the end of the file and hands on complete lines.
func (t *tail) read(fn func([]byte) error) error {
	buf := make([]byte, 64<<10)
	for {
		n, err := t.file.ReadAt(buf, t.pos)
		if n > 0 {
			t.pos += int64(n)
			t.partial = append(t.partial, buf[:n]...)
			for {
				i := bytes.IndexByte(t.partial, '\n')
				if i < 0 {
					break
				}
				line := bytes.TrimRight(t.partial[:i], "\r")
				t.partial = t.partial[i+1:]
				if err := fn(line); err != nil {
					return err
				}
			}
			t.partial = append([]byte(nil), t.partial...)
		}
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("follow %s: %w", t.path, err)
		}
	}
}
