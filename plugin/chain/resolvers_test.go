package chain

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestResolversFrom(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := write("plain", "search corp.example\nnameserver 192.0.2.53\nnameserver fe80::1%eth0\nnameserver 2001:db8::53\noptions edns0\n")
	stub := write("stub", "nameserver 127.0.0.53\noptions edns0 trust-ad\n")
	upstream := write("upstream", "nameserver 198.51.100.53\n")
	empty := write("empty", "# nothing\n")
	missing := filepath.Join(dir, "missing")

	for _, tc := range []struct {
		name, conf, up string
		want           []string
		err            string
	}{
		{"plain, zoned address dropped", plain, upstream, []string{"192.0.2.53", "2001:db8::53"}, ""},
		{"loopback stub: its upstream servers", stub, upstream, []string{"198.51.100.53"}, ""},
		{"loopback stub without upstream list: the stub (refused later)", stub, missing, []string{"127.0.0.53"}, ""},
		{"no nameserver", empty, upstream, nil, "names no nameserver"},
		{"no resolv.conf", missing, upstream, nil, "read the host's resolvers"},
	} {
		got, err := resolversFrom(tc.conf, tc.up)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: want error %q, got %v, %v", tc.name, tc.err, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, addrs(tc.want...)) {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
}

func TestResolvConf(t *testing.T) {
	got := string(resolvConf(addrs("203.0.113.53", "2001:db8::53"), []string{"a.example", "b.example"}))
	want := "# written by doorman run: the resolvers this sandbox may query\n" +
		"nameserver 203.0.113.53\nnameserver 2001:db8::53\nsearch a.example b.example\n"
	if got != want {
		t.Errorf("resolv.conf:\n%s\nwant:\n%s", got, want)
	}
	if got := string(resolvConf(addrs("203.0.113.53"), nil)); strings.Contains(got, "search") {
		t.Errorf("no search list: got %q", got)
	}
}
