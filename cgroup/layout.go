package cgroup

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Controllers are the controllers a Group is limited by, in the order
// Layout.Create looks for their hierarchies.
var Controllers = []string{"memory", "pids", "cpu"}

// Hierarchy is one mounted cgroup hierarchy.
type Hierarchy struct {
	// Mount is where it is mounted (/sys/fs/cgroup/memory for a v1
	// hierarchy, /sys/fs/cgroup for v2).
	Mount string
	// Root is the cgroup the mount shows at Mount: "/" unless only a
	// subtree is mounted there.
	Root string
	// V2 says it is the unified hierarchy.
	V2 bool
	// Controllers are those it holds: for v1 from the mount's options,
	// for v2 those its root offers children (cgroup.controllers). The
	// unified hierarchy of a hybrid host holds none.
	Controllers []string
}

// Holds reports whether h holds controller ctrl.
func (h Hierarchy) Holds(ctrl string) bool { return slices.Contains(h.Controllers, ctrl) }

// Dir is the directory of cgroup path (absolute, as /proc/PID/cgroup
// names cgroups) in h.
func (h Hierarchy) Dir(path string) (string, error) {
	if !filepath.IsAbs(path) {
		return "", fmt.Errorf("cgroup path %q is not absolute", path)
	}
	path = filepath.Clean(path)
	rel := path
	if h.Root != "/" {
		var ok bool
		if rel, ok = strings.CutPrefix(path, h.Root); !ok || (rel != "" && rel[0] != '/') {
			return "", fmt.Errorf("cgroup %s is outside the part of the hierarchy mounted at %s (%s)", path, h.Mount, h.Root)
		}
	}
	return filepath.Join(h.Mount, rel), nil
}

// Layout is the cgroup hierarchies this process sees.
type Layout struct {
	Hierarchies []Hierarchy
}

// ReadLayout reads the cgroup hierarchies mounted in this process's mount
// namespace from /proc/self/mountinfo or, where none is mounted (`ip netns
// exec` mounts a fresh /sys without them), those of PID 1's mount
// namespace, reached through /proc/1/root: the cgroups a proxy is put in
// are the host's either way.
func ReadLayout() (*Layout, error) {
	hs, err := readMountinfo("/proc/self/mountinfo", "")
	if err != nil {
		return nil, err
	}
	if len(hs) == 0 {
		// Where PID 1's are out of reach too, there are none.
		hs, _ = readMountinfo("/proc/1/mountinfo", hostRoot)
	}
	return &Layout{Hierarchies: hs}, nil
}

// readMountinfo reads the cgroup hierarchies of a mountinfo file, their
// mount points below root.
func readMountinfo(path, root string) ([]Hierarchy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("cgroup hierarchies: %w", err)
	}
	defer f.Close()
	hs, err := parseMountinfo(f)
	if err != nil {
		return nil, fmt.Errorf("cgroup hierarchies: %s: %w", path, err)
	}
	for i := range hs {
		hs[i].Mount = root + hs[i].Mount
		if hs[i].V2 {
			hs[i].Controllers = readControllers(hs[i].Mount)
		}
	}
	return hs, nil
}

// readControllers reads the controllers a v2 cgroup directory offers its
// children; none if it cannot be read.
func readControllers(dir string) []string {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil
	}
	return strings.Fields(string(data))
}

// parseMountinfo returns the cgroup mounts of a mountinfo file, the first
// mount of each hierarchy only (a hierarchy bind-mounted twice is one).
// Its controllers come from a v1 mount's super options; a v2 mount's are
// left to the caller.
func parseMountinfo(r io.Reader) ([]Hierarchy, error) {
	var out []Hierarchy
	seen := map[string]bool{}
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTIONS
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 {
			continue
		}
		var h Hierarchy
		switch g[0] {
		case "cgroup2":
			h = Hierarchy{V2: true}
		case "cgroup":
			for _, o := range strings.Split(g[2], ",") {
				switch {
				case o == "" || o == "rw" || o == "ro" || strings.Contains(o, "=") && !strings.HasPrefix(o, "name="):
				case strings.HasPrefix(o, "name="):
					// A named hierarchy (name=systemd) holds no
					// controller: it only tracks processes.
				case o == "clone_children" || o == "noprefix" || o == "xattr" || o == "cpuset_v2_mode" || o == "favordynmods":
				default:
					h.Controllers = append(h.Controllers, o)
				}
			}
		default:
			continue
		}
		h.Root, h.Mount = unescapeMount(f[3]), unescapeMount(f[4])
		id := f[2] // the superblock's device: one per hierarchy
		if seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, h)
	}
	return out, sc.Err()
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }

// For returns the hierarchy that holds controller ctrl, or false: a v1
// hierarchy that holds it, else the v2 one if it offers it.
func (l *Layout) For(ctrl string) (Hierarchy, bool) {
	for _, h := range l.Hierarchies {
		if !h.V2 && h.Holds(ctrl) {
			return h, true
		}
	}
	for _, h := range l.Hierarchies {
		if h.V2 && h.Holds(ctrl) {
			return h, true
		}
	}
	return Hierarchy{}, false
}

// V2 returns the unified hierarchy, if one is mounted.
func (l *Layout) V2() (Hierarchy, bool) {
	for _, h := range l.Hierarchies {
		if h.V2 {
			return h, true
		}
	}
	return Hierarchy{}, false
}

// limited returns the hierarchies that hold Controllers, each once, and
// the controllers no hierarchy holds.
func (l *Layout) limited() (hs []Hierarchy, missing []string) {
	for _, c := range Controllers {
		h, ok := l.For(c)
		if !ok {
			missing = append(missing, c)
			continue
		}
		if !slices.ContainsFunc(hs, func(o Hierarchy) bool { return o.Mount == h.Mount }) {
			hs = append(hs, h)
		}
	}
	return hs, missing
}

// Describe says in words where the layout keeps the controllers a Group
// is limited by: "cgroup v2", "cgroup v1", or "hybrid: memory, pids, cpu
// in v1" (v1 hierarchies beside a v2 one).
func (l *Layout) Describe() string {
	var v1, v2 []string
	for _, c := range Controllers {
		if h, ok := l.For(c); ok && h.V2 {
			v2 = append(v2, c)
		} else if ok {
			v1 = append(v1, c)
		}
	}
	_, hasV2 := l.V2()
	switch {
	case len(v1) == 0 && len(v2) == 0:
		return "no hierarchy holds " + strings.Join(Controllers, ", ")
	case len(v1) == 0:
		return "cgroup v2"
	case !hasV2:
		return "cgroup v1"
	case len(v2) == 0:
		return "hybrid: " + strings.Join(v1, ", ") + " in v1"
	}
	return "hybrid: " + strings.Join(v1, ", ") + " in v1, " + strings.Join(v2, ", ") + " in v2"
}
