package spec

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// Absent limits are the defaults; idleTimeout "0s" is none; the
// per-upstream default is a share of the port range; Or lets the
// network's values win.
func TestLimitsEffective(t *testing.T) {
	e := Limits{}.Effective(28232)
	want := Effective{Connections: DefaultConnections, Pending: DefaultPending, PerUpstream: 3529,
		DNSQueriesPerSecond: DefaultDNSQueriesPerSecond, PendingBytes: DefaultPendingBytes, LogMaxSize: DefaultLogMaxSize,
		SniffTimeout: DefaultSniffTimeout, IdleTimeout: DefaultIdleTimeout,
		BufferBytes: DefaultBufferBytes, HeartbeatTimeout: DefaultHeartbeatTimeout}
	if e != want {
		t.Errorf("defaults %+v, want %+v", e, want)
	}
	host := Limits{Connections: 10, IdleTimeout: new(Duration(time.Minute)), DNSQueriesPerSecond: 7, BufferBytes: 8 << 20}
	net := Limits{Connections: 20, IdleTimeout: new(Duration(0)), HeartbeatTimeout: Duration(3 * time.Second)}
	got := host.Or(net).Effective(0)
	if got.Connections != 20 || got.IdleTimeout != 0 || got.DNSQueriesPerSecond != 7 || got.PerUpstream != 20 ||
		got.BufferBytes != 8<<20 || got.HeartbeatTimeout != 3*time.Second {
		t.Errorf("host.Or(network): %+v", got)
	}
	if *host.IdleTimeout != Duration(time.Minute) {
		t.Error("Or changed its receiver's idle timeout")
	}
}

// FuzzParseLimits checks that ParseLimits never panics and that what it
// accepts is valid and encodes and decodes again to equal caps.
func FuzzParseLimits(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		l, err := ParseLimits(data)
		if err != nil {
			return
		}
		if err := l.Validate(); err != nil {
			t.Fatalf("accepted %q, which is not valid: %v", data, err)
		}
		again, err := json.Marshal(l)
		if err != nil {
			t.Fatalf("accepted %q, but it does not encode: %v", data, err)
		}
		back, err := ParseLimits(again)
		if err != nil || !reflect.DeepEqual(back, l) {
			t.Fatalf("%q: encodes to %s, which decodes to %+v, %v; want %+v", data, again, back, err, l)
		}
	})
}
