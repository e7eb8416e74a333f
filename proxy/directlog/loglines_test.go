package directlog

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/proxy/internal/logtest"
)

// The lines the watcher writes are fixed to the byte: an allowDirect
// flow's connection line, and the one about lost events.
func TestLinesGolden(t *testing.T) {
	var buf bytes.Buffer
	w := &Watcher{sandbox: "sb-golden", logger: slog.New(slog.NewJSONHandler(&buf, nil))}
	es := entries(t, "203.0.113.7:5432", "[2001:db8::1]:443")
	for _, f := range []string{"203.0.113.7:5432", "[2001:db8::1]:443"} {
		client := "10.88.0.5:40000"
		proto := uint8(unix.IPPROTO_TCP)
		if strings.HasPrefix(f, "[") {
			client, proto = "[2001:db8:1::5]:40001", unix.IPPROTO_UDP
		}
		rec, ok := directRecord("sb-golden", flow(proto, client, f, f), es, time.Now())
		if !ok {
			t.Fatalf("flow to %s not logged", f)
		}
		w.log(t.Context(), rec)
	}
	w.overruns.Store(3)
	w.reportOverruns(false)
	logtest.Check(t, logtest.Lines(buf.String()),
		`{"level":"INFO","msg":"connection","sandbox":"sb-golden","client":"10.88.0.5:40000","dst":"203.0.113.7:5432","proto":"tcp","name":"","rule":"203.0.113.7:5432","verdict":"allow","reason":"allowDirect","bytes_up":0,"bytes_down":0,"duration_ms":0}`,
		`{"level":"INFO","msg":"connection","sandbox":"sb-golden","client":"[2001:db8:1::5]:40001","dst":"[2001:db8::1]:443","proto":"udp","name":"","rule":"[2001:db8::1]:443","verdict":"allow","reason":"allowDirect","bytes_up":0,"bytes_down":0,"duration_ms":0}`,
		`{"level":"WARN","msg":"allowDirect events lost","sandbox":"sb-golden","overruns":3,"err":"conntrack event queue overrun (ENOBUFS): allowDirect flows started meanwhile have no line"}`,
	)
}
