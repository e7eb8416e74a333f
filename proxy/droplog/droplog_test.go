package droplog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/doorman-net/doorman/proxy/decisionlog"
)

type fakeReader struct{ counts []Count }

func (f *fakeReader) ReadDrops() ([]Count, error) { return f.counts, nil }

func TestPollLogsRises(t *testing.T) {
	var buf bytes.Buffer
	r := &fakeReader{}
	p := New(Config{Sandbox: "sbx", Reader: r, Logger: slog.New(decisionlog.NewJSONHandler(&buf))})
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	const inet, udp = "table inet doorman-host", "udp not to a resolver is dropped"
	steps := []struct {
		counts []Count
		want   []int // counts of the lines written
	}{
		{[]Count{{inet, udp, 0}}, nil},
		{[]Count{{inet, udp, 3}}, []int{3}},
		{[]Count{{inet, udp, 3}}, nil},
		{[]Count{{inet, udp, 5}, {inet, "everything else from the sandbox is dropped", 1}}, []int{2, 1}},
		{[]Count{{inet, udp, 1}}, []int{1}}, // installed anew
	}
	for i, s := range steps {
		buf.Reset()
		r.counts = s.counts
		if err := p.Poll(t0.Add(time.Duration(i) * time.Second)); err != nil {
			t.Fatal(err)
		}
		var got []int
		var c decisionlog.Counts
		for _, line := range bytes.Split(bytes.TrimSpace(buf.Bytes()), []byte("\n")) {
			if len(line) == 0 {
				continue
			}
			d, ok := decisionlog.Parse(line)
			if !ok {
				t.Fatalf("step %d: not a decision line: %s", i, line)
			}
			if d.Verdict != decisionlog.Deny || d.Sandbox != "sbx" || d.Reason[:len(ReasonPrefix)] != ReasonPrefix {
				t.Errorf("step %d: line %s", i, line)
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
