package daemon

import (
	"bufio"
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// dropBinaryPages unmaps this process's mappings of its own executable's
// read-only pages (code and read-only data). It returns how many bytes of
// address space it released.
//
// Why: on a page fault in a file that sits in the page cache the kernel
// maps up to 64 KiB around the page (fault-around), so a proxy that runs a
// few hundred KiB of the binary's code ends up with most of the 10 MiB
// binary in its RSS: 7.7 of its 8.9 MiB just after start. Those pages stay
// in the page cache, shared with every other doorman process; dropping the
// mappings gives nothing private up, and a page the proxy needs again is
// mapped back on its next touch (a minor fault while the binary is
// cached). What the RSS then shows is what the proxy touched since, and
// page cache no process maps is the first the kernel reclaims under
// pressure rather than the last.
//
// Only mappings of the executable that are not writable and hold no
// anonymous (copied-on-write) pages are dropped: MADV_DONTNEED on such a
// mapping can only discard pages that equal the file. Writable mappings
// (the binary's data) and relocated read-only data of a PIE build are left
// alone.
func dropBinaryPages() (int, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	// Read as a stream, line by line without copies: whatever this
	// allocates stays in the heap's RSS until the runtime scavenges it.
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		return 0, err
	}
	maps, err := parseSmaps(f, exe)
	f.Close()
	if err != nil {
		return 0, err
	}
	dropped := 0
	for _, m := range maps {
		if m.end == 0 || m.path != exe || strings.ContainsRune(m.perms, 'w') || m.anonKiB != 0 {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); errno != 0 {
			return dropped, errno
		}
		dropped += int(m.end - m.start)
	}
	return dropped, nil
}

// smapsEntry is one mapping of /proc/PID/smaps, the fields dropBinaryPages
// reads.
type smapsEntry struct {
	start, end uintptr
	perms      string // "r-xp"
	path       string // empty for anonymous mappings
	anonKiB    int64  // the "Anonymous:" field
}

// parseSmaps reads the mappings of a /proc/PID/smaps file that map path
// (every mapping if path is empty). A mapping whose header or Anonymous
// field cannot be read is reported with anonKiB -1, so that a caller
// checking for 0 leaves it alone.
func parseSmaps(r io.Reader, path string) ([]smapsEntry, error) {
	var out []smapsEntry
	keep := false // the current mapping is one of path's
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Bytes()
		key, val, isField := bytes.Cut(line, []byte(":"))
		if isField && !bytes.ContainsAny(key, " -") {
			// A field of the current mapping: "Anonymous:  0 kB".
			if keep && string(key) == "Anonymous" {
				n := int64(-1)
				if f := bytes.Fields(val); len(f) == 2 && string(f[1]) == "kB" {
					if v, err := strconv.ParseInt(string(f[0]), 10, 64); err == nil {
						n = v
					}
				}
				out[len(out)-1].anonKiB = n
			}
			continue
		}
		// A mapping's header:
		// 00400000-008c1000 r-xp 00000000 fd:01 1234   /path/to/doorman
		f := bytes.Fields(line)
		var name []byte
		if len(f) >= 6 {
			name = bytes.Join(f[5:], []byte(" "))
		}
		keep = path == "" || string(name) == path
		if !keep {
			continue
		}
		e := smapsEntry{anonKiB: -1, path: string(name)}
		if len(f) >= 5 {
			lo, hi, _ := bytes.Cut(f[0], []byte("-"))
			start, err1 := strconv.ParseUint(string(lo), 16, 64)
			end, err2 := strconv.ParseUint(string(hi), 16, 64)
			if err1 == nil && err2 == nil && end > start {
				e.start, e.end, e.perms = uintptr(start), uintptr(end), string(f[1])
			}
		}
		out = append(out, e)
	}
	return out, sc.Err()
}
