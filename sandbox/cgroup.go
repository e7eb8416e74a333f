package sandbox

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/spec"
)

// DefaultCgroupSlice is doorman's slice: where a proxy's cgroup goes when
// the runtime names no cgroup for the sandbox (or one doorman cannot use).
// It is made by the first proxy and kept (it is shared); its limits, if an
// operator sets any, cap all proxies there together.
const DefaultCgroupSlice = "/doorman.slice"

// ProxyCgroup is the cgroup a sandbox's proxy (its supervisor and worker)
// runs in: cgroup.Group's path and directories, and where it was placed.
type ProxyCgroup struct {
	cgroup.Group
	// Parent is the cgroup it is below: the runtime's (see
	// Attachment.CgroupParent), or DefaultCgroupSlice.
	Parent string `json:"parent"`
	// Slice says it is in doorman's slice.
	Slice bool `json:"slice,omitempty"`
	// Note says what is not as asked: why it is not below the runtime's
	// cgroup, which controllers no hierarchy holds.
	Note string `json:"note,omitempty"`
}

// cgroupName is the name of the proxy's cgroup of sandbox key; n > 0
// numbers another one, for when a proxy that runs on holds the first.
func cgroupName(key string, n int) string {
	if n == 0 {
		return "doorman-" + key
	}
	return fmt.Sprintf("doorman-%s-%d", key, n)
}

// makeCgroup makes the cgroup the next proxy of s runs in, with s's
// limits: below the cgroup the runtime named, else (none, or one that
// cannot take it: on v2 a parent that holds processes) in doorman's slice.
// A host where no cgroup can be made at all (no hierarchy, a read-only
// one) runs the proxy without: s.CgroupError says why, and nothing else
// fails. It returns the group, or nil.
func (s *State) makeCgroup() *cgroup.Group {
	s.removeLeftovers()
	s.Cgroup, s.CgroupError = nil, ""
	lim := spec.ProxyLimitsWithDefaults(s.ProxyLimits)
	// The proxy's sockets are charged to its cgroup and bounded there
	// (see spec.Limits.BufferBytes). The kernel charges a socket
	// from its making (or accept) on, so the limit is set here, before
	// the proxy starts.
	lim.SocketMemory = uint64(s.Limits.Effective(0).BufferBytes)
	layout, err := s.sys().cgroups.Layout()
	if err != nil {
		s.CgroupError = err.Error()
		return nil
	}
	var notes []string
	if s.CgroupParent != "" {
		parent, err := cgroup.ParsePath(s.CgroupParent)
		if err == nil {
			var pc *ProxyCgroup
			if pc, err = s.createCgroup(layout, parent, lim, false); err == nil {
				s.Cgroup = pc
				return &pc.Group
			}
		}
		notes = append(notes, fmt.Sprintf("not below the runtime's cgroup %s: %v", s.CgroupParent, err))
	}
	pc, err := s.createCgroup(layout, DefaultCgroupSlice, lim, true)
	if err != nil {
		s.CgroupError = strings.Join(append(notes, err.Error()), "; ")
		return nil
	}
	pc.Note = strings.Join(append(notes, pc.Note), "; ")
	pc.Note = strings.Trim(pc.Note, "; ")
	s.Cgroup = pc
	return &pc.Group
}

// createCgroup makes the proxy's cgroup below parent, under the first
// name no running proxy holds.
func (s *State) createCgroup(layout cgroupLayout, parent string, lim cgroup.Limits, slice bool) (*ProxyCgroup, error) {
	var keep []string
	if slice {
		keep = []string{DefaultCgroupSlice}
	}
	var last error
	for n := range 4 {
		g, missing, err := layout.Create(parent, cgroupName(s.Key, n), lim, cgroup.CreateOptions{Keep: keep})
		if errors.Is(err, cgroup.ErrBusy) {
			last = err
			continue
		}
		if err != nil {
			return nil, err
		}
		pc := &ProxyCgroup{Group: *g, Parent: parent, Slice: slice}
		if len(missing) > 0 {
			pc.Note = fmt.Sprintf("no cgroup hierarchy holds %s (%s): not limited", strings.Join(missing, ", "), layout.Describe())
		}
		return pc, nil
	}
	return nil, last
}

// removeCgroup removes the proxy's cgroup, killing what still runs
// there; one already gone is fine. One this process cannot reach (its
// hierarchy is not mounted in this mount namespace, as under `ip netns
// exec`, and PID 1's is out of reach) is moved to LeftoverCgroups, which
// a later start, stop or teardown from elsewhere removes: the processes
// of the proxy were stopped through their pidfds either way.
func (s *State) removeCgroup() error {
	s.removeLeftovers()
	if s.Cgroup == nil {
		return nil
	}
	err := s.sys().cgroups.Remove(&s.Cgroup.Group, 5*time.Second)
	if errors.Is(err, cgroup.ErrNotMounted) {
		s.LeftoverCgroups = append(s.LeftoverCgroups, s.Cgroup.Group)
		err = nil
	}
	if err != nil {
		return err
	}
	s.Cgroup = nil
	return nil
}

// removeLeftovers removes what it can reach of LeftoverCgroups.
func (s *State) removeLeftovers() {
	var keep []cgroup.Group
	for _, g := range s.LeftoverCgroups {
		if err := s.sys().cgroups.Remove(&g, 5*time.Second); err != nil {
			keep = append(keep, g)
		}
	}
	s.LeftoverCgroups = keep
}
