package cgroup

import (
	"fmt"
	"path"
	"strings"
)

// ParsePath turns a runtime's name for a cgroup into its path in the
// cgroup tree, in either driver's form:
//
//   - "/kubepods/burstable/pod1", an absolute path (the cgroupfs driver),
//     is that path, cleaned;
//   - "kubepods-burstable-pod1.slice", a systemd slice (what a CRI
//     runtime with the systemd driver gives as a pod's cgroup parent), is
//     "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice";
//   - "system.slice:docker:1234", runc's "slice:prefix:name" for a
//     container under the systemd driver, is the scope runc creates:
//     "/system.slice/docker-1234.scope" (an empty slice is system.slice;
//     a name that is itself a slice is that slice, below the first).
//
// Anything else (a relative path, a malformed slice) is an error naming
// the value.
func ParsePath(s string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("cgroup %q: %s", s, why)
	}
	switch {
	case s == "":
		return bad("empty")
	case strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return bad("holds a control character")
	case strings.HasPrefix(s, "/"):
		return path.Clean(s), nil
	case strings.Count(s, ":") == 2:
		parts := strings.Split(s, ":")
		slice, prefix, name := parts[0], parts[1], parts[2]
		if slice == "" {
			slice = "system.slice"
		}
		p, err := ExpandSlice(slice)
		if err != nil {
			return bad(err.Error())
		}
		if name == "" || strings.Contains(name, "/") {
			return bad("want slice:prefix:name with a name and no '/'")
		}
		unit := name
		if !strings.HasSuffix(name, ".slice") {
			unit = name + ".scope"
			if prefix != "" {
				unit = prefix + "-" + unit
			}
		}
		return path.Join(p, unit), nil
	case strings.HasSuffix(s, ".slice") && !strings.Contains(s, "/"):
		p, err := ExpandSlice(s)
		if err != nil {
			return bad(err.Error())
		}
		return p, nil
	}
	return bad(`want an absolute path (cgroupfs driver), a systemd slice ("name.slice") or "slice:prefix:name" (systemd driver)`)
}

// ExpandSlice is the path of systemd slice unit slice in the cgroup tree:
// each dash opens a level ("a-b-c.slice" is /a.slice/a-b.slice/a-b-c.slice)
// and "-.slice" is the root.
func ExpandSlice(slice string) (string, error) {
	const suffix = ".slice"
	name, ok := strings.CutSuffix(slice, suffix)
	if !ok || name == "" || len(slice) > 255 || strings.ContainsFunc(slice, func(r rune) bool { return !isUnitNameRune(r) }) {
		return "", fmt.Errorf("%q is not a systemd slice name: want at most 255 of A-Z a-z 0-9 : _ . - \\, ending in .slice", slice)
	}
	if name == "-" {
		return "/", nil
	}
	var p, prefix string
	for _, c := range strings.Split(name, "-") {
		if c == "" {
			return "", fmt.Errorf("%q is not a systemd slice name: empty part between dashes", slice)
		}
		p += "/" + prefix + c + suffix
		prefix += c + "-"
	}
	return p, nil
}

// isUnitNameRune reports whether systemd allows r in a unit name.
func isUnitNameRune(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(":_.-\\", r)
}
