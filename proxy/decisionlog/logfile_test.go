package decisionlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// connLine is a connection line of about 300 bytes for name.
func connLine(name string) string {
	return `{"time":"2025-06-01T12:00:00.000000000Z","level":"WARN","msg":"connection","sandbox":"sb","client":"10.88.0.5:40000","dst":"203.0.113.7:443","proto":"tls","name":"` +
		name + `","rule":"","verdict":"deny","reason":"name not allowed","bytes_up":0,"bytes_down":0,"duration_ms":0.1}` + "\n"
}

// At its size the log rotates to path.1, replacing the one before, so a
// log takes at most twice its size; ReadFile reads the rotated file first.
func TestLogFileRotates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sb.log")
	line := connLine("n0000.example")
	maxSize := int64(10 * len(line))
	l, err := OpenLogFile(path, maxSize, "sb")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for i := range 35 {
		if _, err := l.Write([]byte(connLine(fmt.Sprintf("n%04d.example", i)))); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{path, path + RotatedSuffix} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > maxSize {
			t.Errorf("%s: %d bytes, more than %d", p, fi.Size(), maxSize)
		}
	}
	ds, _, err := ReadFile(path, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	// 35 lines, 10 a file: the last file has 5, the rotated one 10.
	if len(ds) != 15 {
		t.Fatalf("%d decisions, want 15", len(ds))
	}
	for i, d := range ds {
		if want := fmt.Sprintf("n%04d.example", 20+i); d.Name != want {
			t.Errorf("decision %d: %s, want %s", i, d.Name, want)
		}
	}
}

// Follow goes on across rotations: it drains the rotated file, then reads
// the new one from its start.
func TestFollowAcrossRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sb.log")
	line := connLine("n0000.example")
	l, err := OpenLogFile(path, int64(3*len(line)), "sb")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	l.Write([]byte(connLine("first.example")))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	got := make(chan string, 64)
	go Follow(ctx, path, 0, func(d Decision) error { got <- d.Name; return nil })
	next := func() string {
		select {
		case n := <-got:
			return n
		case <-time.After(5 * time.Second):
			t.Fatal("no decision")
		}
		return ""
	}
	if n := next(); n != "first.example" {
		t.Fatalf("first: %s", n)
	}
	for i := range 10 {
		name := fmt.Sprintf("n%04d.example", i)
		l.Write([]byte(connLine(name)))
		if n := next(); n != name {
			t.Fatalf("after %d rotations: %s, want %s", i/3, n, name)
		}
	}
}

// WaitPolicy, given an offset taken before the log rotated, finds the
// event in the rotated file.
func TestWaitPolicyAcrossRotation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sb.log")
	line := connLine("n0000.example")
	l, err := OpenLogFile(path, int64(4*len(line)), "sb")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	logger := slog.New(slog.NewJSONHandler(l, nil))
	for range 3 {
		l.Write([]byte(line))
	}
	fi, _ := os.Stat(path)
	offset := fi.Size()
	PolicyLoad{Sandbox: "sb", Path: "/p", Mode: "allowlist", Entries: 2}.Log(context.Background(), logger)
	l.Write([]byte(line)) // rotates: the event is in path.1 now
	if _, err := os.Stat(path + RotatedSuffix); err != nil {
		t.Fatalf("no rotation: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ev, err := WaitPolicy(ctx, path, offset)
	if err != nil || !ev.Loaded || ev.Entries != 2 {
		t.Fatalf("WaitPolicy: %+v, %v", ev, err)
	}
}

// A full disk drops lines without an error, and costs one write a second;
// once there is room again the log says how many lines were lost, after a
// newline that ends the line a failed write cut short.
func TestLogFileFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	path := filepath.Join(dir, "sb.log")
	l, err := OpenLogFile(path, 1<<20, "sb")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// Fill the disk but for a page or so.
	filler := filepath.Join(dir, "filler")
	f, _ := os.Create(filler)
	for {
		if _, err := f.Write(make([]byte, 4096)); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	os.Truncate(filler, mustSize(t, filler)-4096)
	written := 0
	for l.Dropped() == 0 {
		if n, err := l.Write([]byte(connLine(fmt.Sprintf("n%04d.example", written)))); err != nil || n == 0 {
			t.Fatalf("Write: %d, %v", n, err)
		}
		written++
		if written > 1000 {
			t.Fatal("the disk never filled")
		}
	}
	for range 10 {
		l.Write([]byte(connLine("dropped.example")))
	}
	if n := l.Dropped(); n != 11 {
		t.Fatalf("%d dropped, want 11", n)
	}
	os.Remove(filler)
	time.Sleep(retryAfterFailure + 100*time.Millisecond)
	l.Write([]byte(connLine("after.example")))

	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) < 3 {
		t.Fatalf("%d lines", len(lines))
	}
	last, dropped := lines[len(lines)-1], lines[len(lines)-2]
	if d, ok := Parse([]byte(last)); !ok || d.Name != "after.example" {
		t.Errorf("last line %q", last)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(dropped), &m); err != nil || m["msg"] != MsgLogDropped || m[DroppedLinesKey] != 11.0 ||
		!strings.Contains(m[ErrKey].(string), "no space") {
		t.Errorf("dropped line %q (%v)", dropped, err)
	}
	// Every line but the one cut short is whole.
	bad := 0
	for _, s := range lines {
		if !json.Valid([]byte(s)) {
			bad++
		}
	}
	if bad > 1 {
		t.Errorf("%d lines are not JSON:\n%s", bad, data)
	}
}

func mustSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// TestLogFileRawWritesBusyCPU: a raw write that took long without
// sleeping (its thread was running, or waiting for a CPU, as on a busy
// machine) keeps the writes raw (issue 29); TestLogFileRawWrites has one
// that slept.
func TestLogFileRawWritesBusyCPU(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sb.log")
	l, err := OpenLogFile(path, 0, "sb")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.fd < 0 {
		t.Skipf("%s is not on a filesystem a LogFile writes raw", path)
	}
	var raw int
	l.writeRaw = func(fd int, b []byte) (int, error) {
		raw++
		// Busy, not asleep, for longer than rawWriteMax. The bytes are
		// not written: a real write(2) may itself sleep (an inode or
		// journal lock on a machine busy with other tests' I/O), and
		// then pausing raw writes is right, and this test would fail.
		for start := time.Now(); time.Since(start) < 2*rawWriteMax; {
		}
		return len(b), nil
	}
	for i := range 3 {
		if _, err := l.Write([]byte(connLine(fmt.Sprintf("busy%d.example", i)))); err != nil {
			t.Fatal(err)
		}
	}
	if raw != 3 {
		t.Fatalf("%d raw writes for 3 lines that took %v each without sleeping, want 3", raw, 2*rawWriteMax)
	}
	if !l.rawAfter.IsZero() {
		t.Fatalf("raw writes paused until %v after writes that did not sleep", l.rawAfter)
	}
}

// Lines on a local filesystem are written with a raw write(2); one that
// slept and took longer than rawWriteMax sends the writes through the
// runtime for rawWritePause, and another such write soon after for twice
// as long. Every line lands either way, once, whole.
func TestLogFileRawWrites(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sb.log")
	l, err := OpenLogFile(path, 0, "sb")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.fd < 0 {
		t.Skipf("%s is not on a filesystem a LogFile writes raw", path)
	}
	var raw int
	slow := false
	l.writeRaw = func(fd int, b []byte) (int, error) {
		raw++
		if slow {
			time.Sleep(2 * rawWriteMax)
		}
		// A short write: the rest must follow through the runtime.
		return rawWrite(fd, b[:len(b)/2])
	}
	var want strings.Builder
	write := func(name string) {
		t.Helper()
		line := connLine(name)
		want.WriteString(line)
		if _, err := l.Write([]byte(line)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		write(fmt.Sprintf("fast%d.example", i))
	}
	if raw != 3 {
		t.Fatalf("%d raw writes for 3 quick lines, want 3", raw)
	}
	if !l.Quick() {
		t.Fatal("Quick is false after quick raw writes")
	}
	l.mu.Lock()
	busy := l.Quick()
	l.mu.Unlock()
	if busy {
		t.Fatal("Quick is true while another goroutine writes")
	}
	slow = true
	write("slow.example")
	if l.Quick() {
		t.Fatal("Quick is true while raw writes are paused")
	}
	for i := range 3 {
		write(fmt.Sprintf("after%d.example", i))
	}
	if raw != 4 {
		t.Fatalf("%d raw writes, want 4: none after one that took %v", raw, 2*rawWriteMax)
	}
	if d := time.Until(l.rawAfter); d < rawWritePause/2 || d > rawWritePause {
		t.Fatalf("raw writes resume in %v, want about %v", d, rawWritePause)
	}
	// The pause ends; the next raw write sleeps again: twice the pause.
	l.rawAfter = time.Now().Add(-time.Millisecond)
	write("slow-again.example")
	if raw != 5 {
		t.Fatalf("%d raw writes, want 5: one once the pause ended", raw)
	}
	if d := time.Until(l.rawAfter); d < rawWritePause || d > 2*rawWritePause {
		t.Fatalf("raw writes resume in %v after a second slow one, want about %v", d, 2*rawWritePause)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want.String() {
		t.Fatalf("the log holds\n%s\nwant\n%s", got, want.String())
	}
}
