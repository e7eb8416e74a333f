package hostconf

import (
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestResolvers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	stub := write("stub.conf", "nameserver 127.0.0.53\noptions edns0 trust-ad\nsearch corp.test\n")
	upstreams := write("systemd.conf", "nameserver 192.0.2.53\nnameserver 2001:db8::53\n")
	loopUp := write("loop-up.conf", "nameserver 127.0.0.1\n")
	plain := write("plain.conf", "search corp.example\nnameserver 198.51.100.53\nnameserver fe80::1%eth0\nnameserver 127.0.0.1\noptions edns0\n")
	empty := write("empty.conf", "# nothing\n")
	missing := filepath.Join(dir, "missing.conf")
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	for _, tc := range []struct {
		name             string
		resolvConf, sysd string
		want             []netip.Addr
		err              string
	}{
		{"stub only: systemd-resolved's upstreams", stub, upstreams, addrs("192.0.2.53", "2001:db8::53"), ""},
		{"stub only, no systemd-resolved: the stub (refused later)", stub, missing, addrs("127.0.0.53"), ""},
		{"stub only, upstreams loopback too: the stub", stub, loopUp, addrs("127.0.0.53"), ""},
		{"a reachable server: resolv.conf as it is, zoned address dropped", plain, upstreams, addrs("198.51.100.53", "127.0.0.1"), ""},
		{"no nameserver", empty, upstreams, nil, "names no nameserver"},
		{"no resolv.conf", missing, upstreams, nil, "read the host's resolvers"},
	} {
		got, err := resolvers(tc.resolvConf, tc.sysd)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: want error %q, got %v, %v", tc.name, tc.err, got, err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	// The exported reader reads this host's files as resolvers does.
	want, wantErr := resolvers(ResolvConf, SystemdResolvConf)
	if got, err := Resolvers(); !slices.Equal(got, want) || (err == nil) != (wantErr == nil) {
		t.Errorf("Resolvers: %v, %v; resolvers on the host's files: %v, %v", got, err, want, wantErr)
	}
}
