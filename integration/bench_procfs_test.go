package integration

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// benchUserHZ is the unit of the CPU times in /proc/PID/stat: the kernel exports
// them in USER_HZ, which is 100 on every Linux architecture.
const benchUserHZ = 100

// benchProcRSS returns the resident set (VmRSS) and its peak (VmHWM) of pid,
// in bytes, from /proc/PID/status.
func benchProcRSS(pid int) (rss, hwm int64, err error) {
	v, err := benchProcStatus(pid, "VmRSS", "VmHWM")
	if err != nil {
		return 0, 0, err
	}
	return v[0], v[1], nil
}

// benchProcStatus returns the sizes named by keys ("VmRSS", "RssFile", …)
// in /proc/PID/status, in bytes.
func benchProcStatus(pid int, keys ...string) ([]int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(keys))
	found := 0
	for _, line := range strings.Split(string(data), "\n") {
		key, val, ok := strings.Cut(line, ":")
		i := slices.Index(keys, key)
		if !ok || i < 0 {
			continue
		}
		f := strings.Fields(val) // "1234 kB"
		if len(f) != 2 || f[1] != "kB" {
			return nil, fmt.Errorf("/proc/%d/status: unexpected %s line %q", pid, key, line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("/proc/%d/status: %s line %q: %w", pid, key, line, err)
		}
		out[i] = kb << 10
		found++
	}
	if found != len(keys) {
		return nil, fmt.Errorf("/proc/%d/status lacks some of %v", pid, keys)
	}
	return out, nil
}

// benchProcCPU returns the CPU time pid has used, user plus system, from fields
// 14 and 15 of /proc/PID/stat (resolution 1/USER_HZ s).
func benchProcCPU(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces: count after the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:]) // f[0] is field 3
	if len(f) < 13 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	var ticks int64
	for _, x := range f[11:13] {
		n, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: CPU time %q: %w", pid, x, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / benchUserHZ, nil
}

// benchProcSwitches returns how often the threads of pid have been
// switched out, voluntarily (they slept: a wakeup each) or not, summed over
// /proc/PID/task/*/status. Threads that exited meanwhile drop out of the
// sum, so compare it over spans in which the process keeps its threads.
func benchProcSwitches(pid int) (int64, error) {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	var sum int64
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name()))
		if err != nil {
			continue // the thread exited
		}
		for line := range strings.SplitSeq(string(data), "\n") {
			key, val, ok := strings.Cut(line, ":")
			if !ok || (key != "voluntary_ctxt_switches" && key != "nonvoluntary_ctxt_switches") {
				continue
			}
			n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/task/%s/status: %q: %w", pid, t.Name(), line, err)
			}
			sum += n
		}
	}
	return sum, nil
}

// benchProcSockets is the number of sockets pid holds open. (Not all its
// descriptors: Go keeps the pipes of finished splices in a pool until the
// next GC.)
func benchProcSockets(pid int) (int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, e := range ents {
		if target, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(target, "socket:") {
			n++
		}
	}
	return n, nil
}

func benchMiB(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// benchMachineCPU is the CPU time the whole machine (all cores) has spent busy
// (user, nice, system, irq, softirq) and stolen by the hypervisor, from the
// first line of /proc/stat.
type benchMachineCPU struct{ busy, steal, total time.Duration }

func benchReadMachineCPU() (benchMachineCPU, error) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return benchMachineCPU{}, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return benchMachineCPU{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var v [8]int64 // user nice system idle iowait irq softirq steal
	for i := range v {
		if v[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
			return benchMachineCPU{}, fmt.Errorf("/proc/stat: %q: %w", line, err)
		}
	}
	tick := func(n int64) time.Duration { return time.Duration(n) * time.Second / benchUserHZ }
	busy := v[0] + v[1] + v[2] + v[5] + v[6]
	return benchMachineCPU{busy: tick(busy), steal: tick(v[7]), total: tick(busy + v[3] + v[4] + v[7])}, nil
}

func (a benchMachineCPU) sub(b benchMachineCPU) benchMachineCPU {
	return benchMachineCPU{busy: a.busy - b.busy, steal: a.steal - b.steal, total: a.total - b.total}
}

// benchProcPss returns the proportional set size of pid (its private pages
// plus its share of the pages it shares with other processes), in bytes,
// from /proc/PID/smaps_rollup.
func benchProcPss(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "Pss:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/smaps_rollup: %q: %w", pid, line, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/smaps_rollup has no Pss line", pid)
}
