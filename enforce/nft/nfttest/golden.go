// Package nfttest holds rules to golden files in tests: it writes
// expressions as the netlink attributes google/nftables sends for them, so
// that a test can hold a layer's rules to the bytes an earlier release
// installed (what Check of that release's sandboxes compares with).
package nfttest

import (
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
)

// WriteExprs writes exprs to b, one a line: its type and, in hex, the
// netlink attributes google/nftables marshals it to for family fam.
func WriteExprs(t testing.TB, b *strings.Builder, fam nftables.TableFamily, exprs []expr.Any) {
	t.Helper()
	for _, e := range exprs {
		data, err := expr.Marshal(byte(fam), e)
		if err != nil {
			t.Fatalf("marshal %T: %v", e, err)
		}
		fmt.Fprintf(b, "    %-10s %s\n", strings.TrimPrefix(fmt.Sprintf("%T", e), "*expr."), hex.EncodeToString(data))
	}
}

// Compare fails t, naming the first line that differs, unless got is the
// content of the golden file at path. With update it writes got there
// instead.
func Compare(t testing.TB, path, got string, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got == string(want) {
		return
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gl), len(wl)) {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Fatalf("%s: line %d is\n\t%s\nwant\n\t%s", path, i+1, g, w)
		}
	}
}
