package runner

import (
	"strings"
	"testing"
)

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
