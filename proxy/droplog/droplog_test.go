package droplog

import (
	"bytes"
	"encoding/binary"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/proxy/decisionlog"
)

type fakeReader struct{ counts []Count }

func (f *fakeReader) ReadDrops() ([]Count, error) { return f.counts, nil }

// fakePackets hands out queued packets, then reports the deadline.
type fakePackets struct{ queue []Logged }

func (f *fakePackets) Receive(time.Time) ([]Logged, error) {
	got := f.queue
	f.queue = nil
	if len(got) == 0 {
		return nil, os.ErrDeadlineExceeded
	}
	return got, nil
}

func (f *fakePackets) Close() error { return nil }

const (
	inet = "table inet doorman-host"
	udp  = "udp not to a resolver is dropped"
)

// lines parses what buf holds, failing on a line that is not a decision.
func lines(t *testing.T, buf *bytes.Buffer) []decisionlog.Decision {
	t.Helper()
	var out []decisionlog.Decision
	for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		d, ok := decisionlog.Parse(line)
		if !ok {
			t.Fatalf("not a decision line: %s", line)
		}
		out = append(out, d)
	}
	return out
}

func TestPollLogsRises(t *testing.T) {
	var buf bytes.Buffer
	r := &fakeReader{}
	p, err := New(Config{Sandbox: "sbx", Reader: r, Logger: slog.New(decisionlog.NewJSONHandler(&buf))})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	steps := []struct {
		counts []Count
		want   []int // counts of the lines written
	}{
		{[]Count{{inet, udp, 1, 0, 0}}, nil},
		{[]Count{{inet, udp, 1, 0, 3}}, []int{3}},
		{[]Count{{inet, udp, 1, 0, 3}}, nil},
		{[]Count{{inet, udp, 1, 0, 5}, {inet, "everything else from the sandbox is dropped", 2, 0, 1}}, []int{2, 1}},
		{[]Count{{inet, udp, 7, 0, 1}}, []int{1}}, // installed anew: a new handle
	}
	for i, s := range steps {
		buf.Reset()
		r.counts = s.counts
		if err := p.Poll(t0.Add(time.Duration(i) * time.Second)); err != nil {
			t.Fatal(err)
		}
		var got []int
		var c decisionlog.Counts
		for _, d := range lines(t, &buf) {
			if d.Verdict != decisionlog.Deny || d.Sandbox != "sbx" || d.Reason[:len(ReasonPrefix)] != ReasonPrefix {
				t.Errorf("step %d: line %s", i, d.Raw)
			}
			c.Add(d)
			if f := decisionlog.Format(d); !strings.Contains(f, " dropped: host-layer: ") {
				t.Errorf("step %d: formatted %q", i, f)
			}
			got = append(got, d.Count)
		}
		if len(got) != len(s.want) {
			t.Fatalf("step %d: line counts %v, want %v", i, got, s.want)
		}
		sum := 0
		for j := range got {
			if got[j] != s.want[j] {
				t.Errorf("step %d: line counts %v, want %v", i, got, s.want)
			}
			sum += s.want[j]
		}
		if c.Denied != sum {
			t.Errorf("step %d: denied %d, want %d", i, c.Denied, sum)
		}
	}
}

// udpPacket is an IPv4 UDP datagram from src to dst.
func udpPacket(src, dst [4]byte, sport, dport uint16) []byte {
	b := make([]byte, 28)
	b[0], b[9] = 0x45, protoUDP
	copy(b[12:16], src[:])
	copy(b[16:20], dst[:])
	binary.BigEndian.PutUint16(b[20:22], sport)
	binary.BigEndian.PutUint16(b[22:24], dport)
	return b
}

// TestPacketsAndCountersAddUp: each logged packet gets a connection line
// with its addresses, and the counters' denials lines hold only what was
// not logged one by one, so that the lines of a rule add up to its
// counter.
func TestPacketsAndCountersAddUp(t *testing.T) {
	var buf bytes.Buffer
	r := &fakeReader{}
	pk := &fakePackets{}
	p, err := New(Config{Sandbox: "sbx", Reader: r, Logger: slog.New(decisionlog.NewJSONHandler(&buf)),
		OpenPackets: func() (Packets, error) { return pk, nil }})
	if err != nil {
		t.Fatal(err)
	}
	p.openPackets()
	pkt := udpPacket([4]byte{10, 0, 0, 2}, [4]byte{203, 0, 113, 9}, 40000, 9999)
	// 7 dropped, 2 of them logged: one read before the counters, one
	// only when the reading drains the group.
	r.counts = []Count{{inet, udp, 4, 2, 7}}
	pk.queue = []Logged{{Table: inet, Mark: 2, HWProto: etherIPv4, Payload: pkt}}
	got, _ := pk.Receive(time.Time{})
	p.logPackets(got, time.Now())
	pk.queue = []Logged{{Table: inet, Mark: 2, HWProto: etherIPv4, Payload: pkt},
		{Table: inet, Mark: 9, HWProto: etherIPv4, Payload: pkt}} // no such rule: not this sandbox's
	if err := p.Poll(time.Now()); err != nil {
		t.Fatal(err)
	}
	var c decisionlog.Counts
	var packetLines, summed int
	for _, d := range lines(t, &buf) {
		c.Add(d)
		if d.IsSummary() {
			summed += d.Count
			continue
		}
		packetLines++
		if d.Client != "10.0.0.2:40000" || d.Dst != "203.0.113.9:9999" || d.Proto != "udp" ||
			d.Verdict != decisionlog.Deny || d.Reason != "host-layer: udp not to a resolver" || d.Sandbox != "sbx" {
			t.Errorf("packet line %s", d.Raw)
		}
	}
	if packetLines != 2 || summed != 5 || c.Denied != 7 {
		t.Errorf("%d packet lines, %d summed, %d denied: want 2, 5, 7; log:\n%s", packetLines, summed, c.Denied, buf.String())
	}
}

// TestRestartDoesNotLogAgain: a Poller that starts on the state file of
// the one before it logs only what was dropped since; without the file it
// would log the counter's total again.
func TestRestartDoesNotLogAgain(t *testing.T) {
	state := filepath.Join(t.TempDir(), "hostdrops.json")
	r := &fakeReader{counts: []Count{{inet, udp, 4, 1, 5}}}
	run := func(file string) []decisionlog.Decision {
		var buf bytes.Buffer
		p, err := New(Config{Sandbox: "sbx", Reader: r, Logger: slog.New(decisionlog.NewJSONHandler(&buf)), StateFile: file})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Poll(time.Now()); err != nil {
			t.Fatal(err)
		}
		return lines(t, &buf)
	}
	if got := run(state); len(got) != 1 || got[0].Count != 5 {
		t.Fatalf("first poller: %v, want one line of 5", got)
	}
	if got := run(state); len(got) != 0 {
		t.Errorf("restarted on the same counter: %d lines, want none", len(got))
	}
	r.counts[0].Packets = 8
	if got := run(state); len(got) != 1 || got[0].Count != 3 {
		t.Errorf("restarted after 3 more drops: %v, want one line of 3", got)
	}
	// The layer re-applied: a new handle, a counter from zero.
	r.counts[0].Handle, r.counts[0].Packets = 11, 2
	if got := run(state); len(got) != 1 || got[0].Count != 2 {
		t.Errorf("after the rule was installed anew: %v, want one line of 2", got)
	}
	if got := run(""); len(got) != 1 {
		t.Errorf("without a state file: %d lines, want the total logged again (1 line)", len(got))
	}
	os.WriteFile(state, []byte("{"), 0o600)
	if _, err := New(Config{Reader: r, StateFile: state}); err == nil {
		t.Error("New took a malformed state file")
	}
}

func TestReason(t *testing.T) {
	for in, want := range map[string]string{
		"udp not to a resolver is dropped":                                           "host-layer: udp not to a resolver",
		"frames from veth1 not from the sandbox's mac 02:00:00:00:00:01 are dropped": "host-layer: frames from veth1 not from the sandbox's mac 02:00:00:00:00:01",
		"odd": "host-layer: odd",
	} {
		if got := Reason(in); got != want {
			t.Errorf("Reason(%q) = %q, want %q", in, got, want)
		}
	}
}
