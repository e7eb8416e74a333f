package sandbox

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
)

// NoMatchError is the error Find and Match return when no sandbox answers
// to the query.
type NoMatchError struct {
	Query string
}

func (e *NoMatchError) Error() string { return "no sandbox matches " + e.Query }

// AmbiguousError is the error Find and Match return when the query names
// more than one sandbox: a short id prefix shared by several containers,
// or a container attached to several networks.
type AmbiguousError struct {
	Query   string
	Matches []*State
}

func (e *AmbiguousError) Error() string {
	names := make([]string, 0, len(e.Matches))
	for _, s := range e.Matches {
		n := s.Key
		if s.Name != "" {
			n += " (" + s.Name + ")"
		}
		names = append(names, n)
	}
	return fmt.Sprintf("%d sandboxes match %s: %s", len(e.Matches), e.Query, strings.Join(names, ", "))
}

// Find returns the one sandbox under stateDir that query names (see
// Match). Errors are *NoMatchError or *AmbiguousError, or say why the
// state directory could not be read.
func Find(stateDir, query string) (*State, error) {
	states, err := List(stateDir)
	if err != nil {
		return nil, err
	}
	return Match(states, query)
}

// Match returns the one sandbox among states that query names. A query
// names a sandbox by, in this order of precedence:
//
//  1. exactly its key, its container id, its container name, or its
//     network namespace (a path: the recorded one, or any path to the
//     same namespace file, such as /proc/PID/ns/net);
//  2. a prefix of its key or of its container id (container ids are long;
//     "docker ps" shows 12 characters).
//
// For a container id of the form "<namespace>-<64 hex digits>", which
// nerdctl gives CNI plugins, the hexadecimal id alone counts as its
// container id too: `nerdctl ps` shows that one.
//
// The first rule that matches anything decides: an exact name is never
// ambiguous with an id that merely starts with it. If that rule matches
// more than one sandbox (a prefix shared by several ids, a container on
// several networks), Match returns an *AmbiguousError listing them; if no
// rule matches, a *NoMatchError.
func Match(states []*State, query string) (*State, error) {
	if query == "" {
		return nil, errors.New("empty sandbox name: give a container id (or a unique prefix), a container name or a netns path")
	}
	exact := filter(states, func(s *State) bool {
		_, cid, ok := SplitNamespacedID(s.ID)
		return s.Key == query || s.ID == query || (ok && cid == query) || (s.Name != "" && s.Name == query) || sameNetNS(s, query)
	})
	if len(exact) == 0 {
		exact = filter(states, func(s *State) bool {
			_, cid, ok := SplitNamespacedID(s.ID)
			return strings.HasPrefix(s.Key, query) || strings.HasPrefix(s.ID, query) || (ok && strings.HasPrefix(cid, query))
		})
	}
	switch len(exact) {
	case 0:
		return nil, &NoMatchError{Query: query}
	case 1:
		return exact[0], nil
	}
	return nil, &AmbiguousError{Query: query, Matches: exact}
}

func filter(states []*State, keep func(*State) bool) []*State {
	var out []*State
	for _, s := range states {
		if keep(s) {
			out = append(out, s)
		}
	}
	return out
}

// SplitNamespacedID splits a container id of the form "<namespace>-<64
// lowercase hex digits>", as nerdctl passes CNI plugins (its containerd
// namespace, then the container's id), into its two parts; ok is false
// for any other form.
func SplitNamespacedID(id string) (namespace, containerID string, ok bool) {
	const idLen = 64
	if len(id) < idLen+2 || id[len(id)-idLen-1] != '-' {
		return "", "", false
	}
	containerID = id[len(id)-idLen:]
	if strings.Trim(containerID, "0123456789abcdef") != "" {
		return "", "", false
	}
	return id[:len(id)-idLen-1], containerID, true
}

// sameNetNS reports whether query, read as a path, names s's namespace:
// the recorded path once cleaned, or the same nsfs file (a bind-mounted
// /run/netns/NAME and /proc/PID/ns/net of a process in it are the same
// inode) as the one recorded when s was enforced, or for a state recorded
// without it, as the recorded path names now. Queries that are not paths
// are never namespaces.
func sameNetNS(s *State, query string) bool {
	if s.NetNS == "" || !strings.Contains(query, "/") {
		return false
	}
	if filepath.Clean(s.NetNS) == filepath.Clean(query) {
		return true
	}
	dev, ino, err := netnsIdentity(query)
	if err != nil {
		return false
	}
	if s.NetNSIno != 0 {
		return dev == s.NetNSDev && ino == s.NetNSIno
	}
	recDev, recIno, err := netnsIdentity(s.NetNS)
	return err == nil && dev == recDev && ino == recIno
}
