package decisionlog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// Scan calls fn with every decision line of r, in order, and returns the
// number of bytes up to the end of the last complete line (a line still
// being written has no newline yet and is left for the next read). It
// stops at fn's first error and returns it.
func Scan(r io.Reader, fn func(Decision) error) (int64, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	var n int64
	for {
		b, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		n += int64(len(b))
		if d, ok := Parse(bytes.TrimRight(b, "\r\n")); ok {
			if err := fn(d); err != nil {
				return n, err
			}
		}
	}
}

// ReadFile returns the decisions in the log at path that f selects, those
// of its rotated file (path+RotatedSuffix) first, and the offset in path
// after the last complete line, from which Follow can go on. A log that
// does not exist yet holds no decisions.
func ReadFile(path string, f Filter) ([]Decision, int64, error) {
	var out []Decision
	n, err := scanLog(path, func(d Decision) error {
		if f.Match(d) {
			out = append(out, d)
		}
		return nil
	})
	return out, n, err
}

// CountFile counts the decisions logged at path (and in its rotated file)
// at or after since.
func CountFile(path string, since time.Time) (Counts, error) {
	var c Counts
	f := Filter{Since: since}
	_, err := scanLog(path, func(d Decision) error {
		if f.Match(d) {
			c.Add(d)
		}
		return nil
	})
	return c, err
}

// scanLog scans the rotated file of the log at path, then the log, and
// returns the offset after the log's last complete line.
func scanLog(path string, fn func(Decision) error) (int64, error) {
	if _, err := scanFile(path+RotatedSuffix, fn); err != nil {
		return 0, err
	}
	return scanFile(path, fn)
}

func scanFile(path string, fn func(Decision) error) (int64, error) {
	file, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("decision log: %w", err)
	}
	defer file.Close()
	n, err := Scan(file, fn)
	if err != nil {
		return n, fmt.Errorf("decision log %s: %w", path, err)
	}
	return n, nil
}

// Last returns the last n of ds (all of them if n <= 0 or there are
// fewer).
func Last(ds []Decision, n int) []Decision {
	if n <= 0 || n >= len(ds) {
		return ds
	}
	return ds[len(ds)-n:]
}
