package conf

import (
	"fmt"
	"strings"
)

// Mode says what a sandbox may reach at all, before any entry is looked at.
type Mode string

const (
	// ModeNone lets nothing leave the sandbox (DNS to its resolvers aside).
	ModeNone Mode = "none"
	// ModeAllowlist lets through only connections that an entry admits.
	ModeAllowlist Mode = "allowlist"
	// ModeOpen lets everything through; every connection is still logged.
	// It is the audit/learning mode.
	ModeOpen Mode = "open"
)

// validModes lists the modes in the order error messages give them.
const validModes = "none, allowlist, open"

// ParseMode parses a mode name, ignoring case and surrounding space.
// An empty string is an error: callers that have a default apply it
// before calling ParseMode.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case ModeNone, ModeAllowlist, ModeOpen:
		return m, nil
	}
	return "", fmt.Errorf("invalid mode %q: want one of %s", s, validModes)
}

// valid reports whether m is one of the three modes, spelled canonically.
func (m Mode) valid() bool {
	switch m {
	case ModeNone, ModeAllowlist, ModeOpen:
		return true
	}
	return false
}
