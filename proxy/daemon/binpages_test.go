package daemon

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestParseSmaps(t *testing.T) {
	const smaps = `00400000-008c1000 r-xp 00000000 fd:01 1234                               /usr/bin/doorman
Size:               4868 kB
Rss:                4064 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
008c1000-00dd1000 r--p 004c1000 fd:01 1234                               /usr/bin/doorman
Anonymous:            12 kB
00dd1000-00e4a000 rw-p 009d1000 fd:01 1234                               /usr/bin/doorman
Anonymous:           100 kB
00e4a000-02e8d000 rw-p 00000000 00:00 0
Anonymous:            88 kB
7f0000000000-7f0000001000 r--p 00000000 fd:01 99                         /opt/my dir/lib (deleted)
Anonymous:   x kB
`
	got, err := parseSmaps(strings.NewReader(smaps), "")
	if err != nil {
		t.Fatal(err)
	}
	want := []smapsEntry{
		{0x400000, 0x8c1000, "r-xp", "/usr/bin/doorman", 0},
		{0x8c1000, 0xdd1000, "r--p", "/usr/bin/doorman", 12},
		{0xdd1000, 0xe4a000, "rw-p", "/usr/bin/doorman", 100},
		{0xe4a000, 0x2e8d000, "rw-p", "", 88},
		{0x7f0000000000, 0x7f0000001000, "r--p", "/opt/my dir/lib (deleted)", -1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d mappings, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("mapping %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	only, err := parseSmaps(strings.NewReader(smaps), "/usr/bin/doorman")
	if err != nil {
		t.Fatal(err)
	}
	if len(only) != 3 || only[1] != want[1] || only[2] != want[2] {
		t.Errorf("mappings of /usr/bin/doorman: %+v, want the first three of %+v", only, want)
	}
}

// TestDropBinaryPages drops this test binary's read-only pages and checks
// that its file-backed RSS went down and that it still runs (code and
// read-only data are mapped back on their next touch).
func TestDropBinaryPages(t *testing.T) {
	before := rssFileKiB(t)
	n, err := dropBinaryPages()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no mapping of the executable was dropped")
	}
	after := rssFileKiB(t)
	if after >= before {
		t.Fatalf("RssFile %d kB before, %d kB after dropping %d bytes", before, after, n)
	}
	// Code and read-only data still work: a map literal, fmt, strings.
	if s := strings.Repeat("ok", 3); s != "okokok" {
		t.Fatal(s)
	}
	t.Logf("RssFile %d kB -> %d kB", before, after)
}

func rssFileKiB(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			if err != nil {
				t.Fatalf("RssFile: %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}
