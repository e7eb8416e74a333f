package cgroup

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Max, as a limit, means no limit: the kernel's "max".
const Max = math.MaxUint64

// Limits are what a Group may use. A zero field leaves the kernel's
// default, which is no limit (and, for the CPU weight, the same share as a
// sibling's).
type Limits struct {
	// Memory caps the group's memory in bytes, page cache and kernel
	// memory included: memory.max on v2, memory.limit_in_bytes on v1.
	// Swap is not a way around it (memory.swap.max is 0 on v2; on v1
	// memory.memsw.limit_in_bytes, where swap is accounted, equals it).
	// When the group reaches it, the kernel reclaims its page cache and
	// then kills one of its processes (the OOM killer).
	Memory uint64 `json:"memory,omitempty"`
	// Pids caps its processes and threads: pids.max.
	Pids uint64 `json:"pids,omitempty"`
	// CPUWeight is its share of CPU time against its siblings when the
	// CPU is contended, on v2's scale: 1 to 10000, 100 the default share.
	// On v1 it is cpu.shares, weight*1024/100 (1024 the default).
	CPUWeight uint64 `json:"cpuWeight,omitempty"`
	// SocketMemory caps what the group's TCP sockets hold in their
	// queues, together, in bytes: on v1 memory.kmem.tcp.limit_in_bytes,
	// which also turns on the charging of their memory to the group (v1
	// charges it nowhere otherwise, and only sockets made after it is
	// set). When the group reaches it the kernel stops queueing more on
	// the group's sockets (their windows close, their writes wait) and
	// puts them, and no other, under memory pressure. v2 always charges
	// socket memory to the group's memory (memory.current, under
	// Memory) and has no limit of its own for it: nothing is written.
	SocketMemory uint64 `json:"socketMemory,omitempty"`
}

// MaxCPUWeight is the highest CPU weight.
const MaxCPUWeight = 10000

// Group is one cgroup in each hierarchy that holds one of Controllers.
type Group struct {
	// Path is the cgroup's path in the tree, the same in every hierarchy.
	Path string `json:"path"`
	// Dirs are its directories, one per hierarchy.
	Dirs []string `json:"dirs"`
}

// ErrUnavailable is the error of Create when no hierarchy this process
// sees holds any of Controllers.
var ErrUnavailable = errors.New("no cgroup hierarchy mounted here holds the memory, pids or cpu controller")

// ErrBusy is the error of Create when a cgroup of that name exists and
// holds processes.
var ErrBusy = errors.New("a cgroup of that name exists and holds processes")

// CreateOptions say how Create places a group.
type CreateOptions struct {
	// Keep are parents Create may make but never removes on failure: a
	// slice of doorman's own, shared by every group below it. Create
	// removes the other parents it made when it fails.
	Keep []string
}

// Create makes the cgroup parent/name in every hierarchy that holds one of
// Controllers (making parent where it is missing) and sets lim in it. A
// leftover cgroup of that name without processes is taken over; one with
// processes is ErrBusy. On v2 the controllers are enabled on the way down
// from the root, which fails where a cgroup on the way holds processes.
// Controllers no hierarchy holds are not limited: missing names them. On
// error nothing Create made is left.
func (l *Layout) Create(parent, name string, lim Limits, opts CreateOptions) (g *Group, missing []string, err error) {
	if !filepath.IsAbs(parent) {
		return nil, nil, fmt.Errorf("cgroup parent %q is not absolute", parent)
	}
	if name == "" || strings.ContainsAny(name, "/\x00\n") || name == "." || name == ".." || len(name) > 255 {
		return nil, nil, fmt.Errorf("cgroup name %q: want one path component", name)
	}
	hs, missing := l.limited()
	if len(hs) == 0 {
		return nil, missing, ErrUnavailable
	}
	g = &Group{Path: filepath.Join(parent, name)}
	var made []string // directories made, in order
	// keep reports whether dir is one of opts.Keep in some hierarchy.
	keep := func(dir string) bool {
		for _, h := range hs {
			for _, k := range opts.Keep {
				if d, err := h.Dir(k); err == nil && d == dir {
					return true
				}
			}
		}
		return false
	}
	defer func() {
		if err != nil {
			for i := len(made) - 1; i >= 0; i-- {
				if !keep(made[i]) {
					rmdir(made[i])
				}
			}
			g = nil
		}
	}()
	for _, h := range hs {
		dir, err := h.Dir(g.Path)
		if err != nil {
			return nil, missing, err
		}
		top, err := h.Dir("/")
		if err != nil {
			return nil, missing, err
		}
		if err := mkdirParents(top, filepath.Dir(dir), h.V2, &made); err != nil {
			return nil, missing, err
		}
		switch err := os.Mkdir(dir, 0o755); {
		case err == nil:
			made = append(made, dir)
		case errors.Is(err, os.ErrExist):
			if pids, err := readProcs(dir); err != nil {
				return nil, missing, err
			} else if len(pids) > 0 {
				return nil, missing, fmt.Errorf("cgroup %s: %w (%v)", dir, ErrBusy, pids)
			}
			made = append(made, dir) // a leftover: removed with the rest on failure
		default:
			return nil, missing, fmt.Errorf("cgroup: %w", err)
		}
		g.Dirs = append(g.Dirs, dir)
		if err := setLimits(dir, h, lim); err != nil {
			return nil, missing, err
		}
	}
	return g, missing, nil
}

// mkdirParents makes dir and its missing parents below top, appending
// what it made to made. On v2 it enables, from top down to dir, the
// controllers dir's children need.
func mkdirParents(top, dir string, v2 bool, made *[]string) error {
	rel, err := filepath.Rel(top, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return fmt.Errorf("cgroup %s is not below %s", dir, top)
	}
	cur := top
	if v2 {
		if err := enableControllers(cur); err != nil {
			return err
		}
	}
	if rel == "." {
		return nil
	}
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		cur = filepath.Join(cur, part)
		switch err := os.Mkdir(cur, 0o755); {
		case err == nil:
			*made = append(*made, cur)
		case errors.Is(err, os.ErrExist):
		default:
			return fmt.Errorf("cgroup: %w", err)
		}
		if v2 {
			if err := enableControllers(cur); err != nil {
				return err
			}
		}
	}
	return nil
}

// enableControllers enables, for the children of v2 cgroup dir, those of
// Controllers it offers and does not enable yet.
func enableControllers(dir string) error {
	offered := readControllers(dir)
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	enabled := strings.Fields(string(data))
	var add []string
	for _, c := range Controllers {
		if slices.Contains(offered, c) && !slices.Contains(enabled, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	err = writeFile(dir, "cgroup.subtree_control", strings.Join(add, " "))
	if errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("cgroup %s holds processes, so cgroup v2 gives its children no controllers (the no-internal-processes rule): %w", dir, err)
	}
	return err
}

// setLimits writes lim into dir, a cgroup of hierarchy h, for the
// controllers h holds.
func setLimits(dir string, h Hierarchy, lim Limits) error {
	type setting struct{ file, value string }
	var set []setting
	if h.Holds("memory") && lim.Memory != 0 {
		if h.V2 {
			set = append(set, setting{"memory.max", maxOr(lim.Memory)})
			if exists(dir, "memory.swap.max") {
				set = append(set, setting{"memory.swap.max", "0"})
			}
		} else {
			v := "-1"
			if lim.Memory != Max {
				v = strconv.FormatUint(lim.Memory, 10)
			}
			set = append(set, setting{"memory.limit_in_bytes", v})
			if exists(dir, "memory.memsw.limit_in_bytes") {
				set = append(set, setting{"memory.memsw.limit_in_bytes", v})
			}
		}
	}
	if h.Holds("memory") && !h.V2 && lim.SocketMemory != 0 {
		v := "-1"
		if lim.SocketMemory != Max {
			v = strconv.FormatUint(lim.SocketMemory, 10)
		}
		set = append(set, setting{tcpLimitFile, v})
	}
	if h.Holds("pids") && lim.Pids != 0 {
		set = append(set, setting{"pids.max", maxOr(lim.Pids)})
	}
	if h.Holds("cpu") && lim.CPUWeight != 0 {
		if lim.CPUWeight > MaxCPUWeight {
			return fmt.Errorf("cpu weight %d: want 1 to %d", lim.CPUWeight, MaxCPUWeight)
		}
		if h.V2 {
			set = append(set, setting{"cpu.weight", strconv.FormatUint(lim.CPUWeight, 10)})
		} else {
			set = append(set, setting{"cpu.shares", strconv.FormatUint(SharesOf(lim.CPUWeight), 10)})
		}
	}
	for _, s := range set {
		if err := writeFile(dir, s.file, s.value); err != nil {
			return err
		}
	}
	return nil
}

// tcpLimitFile is cgroup v1's limit on its sockets' memory. Linux
// deprecates it with the rest of v1's kernel memory files (writing it
// logs a warning), and keeps it working.
const tcpLimitFile = "memory.kmem.tcp.limit_in_bytes"

// SharesOf is cgroup v1's cpu.shares for CPU weight w: w*1024/100, at
// least 2 (the kernel's minimum).
func SharesOf(w uint64) uint64 { return max(2, w*1024/100) }

func maxOr(v uint64) string {
	if v == Max {
		return "max"
	}
	return strconv.FormatUint(v, 10)
}

func exists(dir, file string) bool {
	_, err := os.Stat(filepath.Join(dir, file))
	return err == nil
}

// writeFile writes value to the cgroup interface file dir/file.
func writeFile(dir, file, value string) error {
	path := filepath.Join(dir, file)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("cgroup: write %q to %s: %w", value, path, err)
	}
	return nil
}

// Join moves process pid, with all its threads, into g in every
// hierarchy. What pid allocated before stays charged where it was. A
// hierarchy where pid is in g already is left alone: a move, even of a
// process into its own cgroup, can wait for an RCU grace period (see
// WarmMigration), and reading the cgroup's processes does not.
func (g *Group) Join(pid int) error {
	dirs, err := g.located()
	if err != nil {
		return err
	}
	for _, d := range dirs {
		if in, err := readProcs(d); err == nil && slices.Contains(in, pid) {
			continue
		}
		if err := writeFile(d, "cgroup.procs", strconv.Itoa(pid)); err != nil {
			return err
		}
	}
	return nil
}

// ErrNotMounted is the error of a Group's method whose directory is on
// no cgroup filesystem this process can reach: its hierarchy is mounted
// neither in this mount namespace nor in PID 1's, so nothing can be said
// of it, nor done to it.
var ErrNotMounted = errors.New("its cgroup hierarchy is not mounted here")

// hostRoot is PID 1's root directory: where a process whose own mount
// namespace has no cgroup hierarchy mounted (`ip netns exec` mounts a
// fresh /sys) still finds the host's.
const hostRoot = "/proc/1/root"

// located returns g's directories as this process reaches them: each
// where its hierarchy is mounted here, else through hostRoot.
func (g *Group) located() ([]string, error) {
	out := make([]string, len(g.Dirs))
	for i, d := range g.Dirs {
		l, err := locate(d)
		if err != nil {
			return nil, err
		}
		out[i] = l
	}
	return out, nil
}

// locate returns the path through which cgroup directory dir is reached
// from this mount namespace: dir where its hierarchy is mounted here, else
// the same path below hostRoot; ErrNotMounted if neither.
func locate(dir string) (string, error) {
	if onCgroupFS(dir) {
		return dir, nil
	}
	if !strings.HasPrefix(dir, hostRoot+"/") && onCgroupFS(hostRoot+dir) {
		return hostRoot + dir, nil
	}
	return "", fmt.Errorf("cgroup %s: %w", dir, ErrNotMounted)
}

// onCgroupFS reports whether dir, or where it is missing the nearest
// parent there is, is on a cgroup filesystem.
func onCgroupFS(dir string) bool {
	for d := dir; ; d = filepath.Dir(d) {
		var st unix.Statfs_t
		err := unix.Statfs(d, &st)
		if err == nil {
			return st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC
		}
		if d == "/" || !errors.Is(err, unix.ENOENT) {
			return false
		}
	}
}

// Procs lists the processes in g, in any of its hierarchies.
func (g *Group) Procs() ([]int, error) {
	dirs, err := g.located()
	if err != nil {
		return nil, err
	}
	var out []int
	for _, d := range dirs {
		pids, err := readProcs(d)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed
		}
		if err != nil {
			return nil, err
		}
		for _, p := range pids {
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// readProcs reads the pids in cgroup directory dir.
func readProcs(dir string) ([]int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			out = append(out, pid)
		}
	}
	return out, nil
}

// Kill sends SIGKILL to every process in g: through cgroup.kill where v2
// has one, else to each process listed, through a pidfd opened before
// checking that the process is still in g, so that a pid reused since
// the listing is never signalled.
func (g *Group) Kill() error {
	dirs, err := g.located()
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if exists(d, "cgroup.kill") {
			if err := writeFile(d, "cgroup.kill", "1"); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		pids, err := readProcs(d)
		if errors.Is(err, os.ErrNotExist) {
			continue // removed
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, pid := range pids {
			if err := killMember(d, pid); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// killMember kills pid if it is (still) in cgroup directory dir.
func killMember(dir string, pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(fd)
	pids, err := readProcs(dir)
	if err != nil || !slices.Contains(pids, pid) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill %d in %s: %w", pid, dir, err)
	}
	return nil
}

// Remove kills what still runs in g, waits until it is empty (up to
// timeout) and removes its directories. A group already gone is no error;
// one this process cannot reach (ErrNotMounted) is.
func (g *Group) Remove(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		pids, err := g.Procs()
		if err != nil {
			return fmt.Errorf("remove cgroup %s: %w", g.Path, err)
		}
		if len(pids) == 0 {
			err := g.rmdirs()
			if err == nil || !errors.Is(err, unix.EBUSY) {
				return err
			}
		} else if err := g.Kill(); err != nil {
			// Again on every round: a process may have forked
			// meanwhile.
			return fmt.Errorf("remove cgroup %s: %w", g.Path, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove cgroup %s: processes %v still in it %v after SIGKILL", g.Path, pids, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rmdirs removes g's directories; those already gone are fine.
func (g *Group) rmdirs() error {
	dirs, err := g.located()
	if err != nil {
		return err
	}
	var errs []error
	for _, d := range dirs {
		if err := rmdir(d); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rmdir removes cgroup directory dir; one already gone is fine.
func rmdir(dir string) error {
	if err := unix.Rmdir(dir); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove cgroup %s: %w", dir, err)
	}
	return nil
}

// Exists reports whether any of g's directories is still there.
func (g *Group) Exists() bool {
	dirs, err := g.located()
	if err != nil {
		return false
	}
	for _, d := range dirs {
		if _, err := os.Stat(d); err == nil {
			return true
		}
	}
	return false
}

// OOMKills is how many processes the kernel's OOM killer has killed in g
// because g reached its memory limit; ok is false where g has no memory
// controller or the kernel does not count them.
func (g *Group) OOMKills() (n uint64, ok bool) {
	dirs, err := g.located()
	if err != nil {
		return 0, false
	}
	for _, d := range dirs {
		for _, f := range []string{"memory.events", "memory.oom_control"} {
			data, err := os.ReadFile(filepath.Join(d, f))
			if err != nil {
				continue
			}
			if v, ok := keyedValue(string(data), "oom_kill"); ok {
				return v, true
			}
		}
	}
	return 0, false
}

// keyedValue reads key's value from a flat keyed file ("key value" lines).
func keyedValue(data, key string) (uint64, bool) {
	for line := range strings.SplitSeq(data, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// Limits reads back the limits set in g; a field is zero where g has no
// hierarchy with its controller, and Max where it is unlimited.
func (g *Group) Limits() (Limits, error) {
	var l Limits
	read := func(d, file string) (string, bool, error) {
		data, err := os.ReadFile(filepath.Join(d, file))
		if errors.Is(err, os.ErrNotExist) {
			return "", false, nil
		}
		return strings.TrimSpace(string(data)), err == nil, err
	}
	num := func(s string) (uint64, error) {
		if s == "max" || s == "-1" {
			return Max, nil
		}
		n, err := strconv.ParseUint(s, 10, 64)
		// v1 shows "no limit" as the largest page-aligned number.
		if err == nil && n >= math.MaxInt64&^4095 {
			return Max, nil
		}
		return n, err
	}
	dirs, err := g.located()
	if err != nil {
		return l, err
	}
	for _, d := range dirs {
		for _, f := range []struct {
			file string
			to   *uint64
			conv func(uint64) uint64
		}{
			{"memory.max", &l.Memory, nil}, {"memory.limit_in_bytes", &l.Memory, nil},
			{tcpLimitFile, &l.SocketMemory, nil},
			{"pids.max", &l.Pids, nil},
			{"cpu.weight", &l.CPUWeight, nil}, {"cpu.shares", &l.CPUWeight, func(s uint64) uint64 { return s * 100 / 1024 }},
		} {
			s, ok, err := read(d, f.file)
			if err != nil {
				return l, fmt.Errorf("cgroup %s: %w", d, err)
			}
			if !ok {
				continue
			}
			n, err := num(s)
			if err != nil {
				return l, fmt.Errorf("cgroup %s: %s %q: %w", d, f.file, s, err)
			}
			if f.conv != nil {
				n = f.conv(n)
			}
			*f.to = n
		}
	}
	return l, nil
}

// Usage is what g uses now: memory in bytes and processes (threads
// included); a field is zero where g has no hierarchy with its controller.
// SocketMemory is what its TCP sockets hold, as charged to it (on v1 only
// where SocketMemory is limited; on v2 memory.stat's sock, part of Memory).
type Usage struct {
	Memory       uint64 `json:"memory"`
	Pids         uint64 `json:"pids"`
	SocketMemory uint64 `json:"socketMemory,omitempty"`
}

// Usage reads what g uses now.
func (g *Group) Usage() Usage {
	var u Usage
	dirs, _ := g.located()
	for _, d := range dirs {
		for _, f := range []struct {
			file string
			to   *uint64
		}{{"memory.current", &u.Memory}, {"memory.usage_in_bytes", &u.Memory}, {"pids.current", &u.Pids}, {"memory.kmem.tcp.usage_in_bytes", &u.SocketMemory}} {
			if data, err := os.ReadFile(filepath.Join(d, f.file)); err == nil {
				if n, err := strconv.ParseUint(strings.TrimSpace(string(data)), 10, 64); err == nil {
					*f.to = n
				}
			}
		}
		if data, err := os.ReadFile(filepath.Join(d, "memory.stat")); err == nil && exists(d, "memory.current") {
			if n, ok := keyedValue(string(data), "sock"); ok {
				u.SocketMemory = n
			}
		}
	}
	return u
}

// Of reads the cgroups of process pid from /proc/PID/cgroup: its path in
// each hierarchy, keyed by the hierarchy's controllers as that file names
// them ("memory", "cpu,cpuacct", "name=systemd", and "" for v2).
func Of(pid int) (map[string]string, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		// ID:CONTROLLERS:PATH
		if f := strings.SplitN(line, ":", 3); len(f) == 3 {
			out[f[1]] = f[2]
		}
	}
	return out, nil
}
