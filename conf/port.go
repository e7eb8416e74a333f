package conf

import (
	"fmt"
	"strconv"
	"strings"
)

// PortRange is an inclusive range of TCP ports. The zero value (Lo and Hi
// both 0) means every port; a single port has Lo == Hi.
type PortRange struct{ Lo, Hi uint16 }

// Any reports whether r is the zero value, which admits every port.
func (r PortRange) Any() bool { return r.Lo == 0 && r.Hi == 0 }

// Contains reports whether port lies in r. Every port lies in the zero value.
func (r PortRange) Contains(port uint16) bool {
	return r.Any() || (r.Lo <= port && port <= r.Hi)
}

// String renders r as written after an entry's ':' ("443", "8000-8999"),
// or "" for the zero value.
func (r PortRange) String() string {
	switch {
	case r.Any():
		return ""
	case r.Lo == r.Hi:
		return strconv.Itoa(int(r.Lo))
	default:
		return strconv.Itoa(int(r.Lo)) + "-" + strconv.Itoa(int(r.Hi))
	}
}

// parsePortRange parses the text after an entry's ':': "443" or
// "8000-8999". Ports run from 1 to 65535. The error says why, without
// naming the entry (the caller does that).
func parsePortRange(s string) (PortRange, error) {
	if s == "" {
		return PortRange{}, fmt.Errorf("empty port after ':'")
	}
	loText, hiText, isRange := strings.Cut(s, "-")
	lo, err := parsePort(loText, s)
	if err != nil {
		return PortRange{}, err
	}
	hi := lo
	if isRange {
		if hi, err = parsePort(hiText, s); err != nil {
			return PortRange{}, err
		}
	}
	if lo > hi {
		return PortRange{}, fmt.Errorf("port range reversed: %s (write %d-%d)", s, hi, lo)
	}
	return PortRange{Lo: lo, Hi: hi}, nil
}

// parsePort parses one decimal port of the port spec whole.
func parsePort(s, whole string) (uint16, error) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, fmt.Errorf("bad port %q: want a number 1-65535 or a range like 8000-8999", whole)
	}
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port out of range: %s (want 1-65535)", s)
	}
	return uint16(n), nil
}
