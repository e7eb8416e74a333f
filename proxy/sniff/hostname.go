package sniff

import "fmt"

// maxHostLen is the longest DNS name in text form, without a trailing dot.
const maxHostLen = 253

// hostCheck is what checkHostName learned about a name.
type hostCheck struct {
	upper      bool // has letters A-Z
	numericEnd bool // its last label is a number, as in an IPv4 address
}

// checkHostName validates name as a DNS host name in ASCII: 1 to 253 bytes,
// dot-separated labels of 1 to 63 bytes (so no leading, trailing or doubled
// dot), each made of letters, digits, '-' and '_' (the underscore appears in
// real service names). Anything else, a NUL or a '*' or a byte >= 0x80 among
// them, is an error that names the offending byte. Callers decide what a
// numeric last label means (an IPv4 literal in a Host header, an error in
// an SNI).
func checkHostName(name []byte) (hostCheck, error) {
	var hc hostCheck
	if len(name) == 0 {
		return hc, fmt.Errorf("empty host name")
	}
	if len(name) > maxHostLen {
		return hc, fmt.Errorf("host name of %d bytes is longer than %d", len(name), maxHostLen)
	}
	start := 0 // of the current label
	for i := 0; i <= len(name); i++ {
		if i == len(name) || name[i] == '.' {
			switch n := i - start; {
			case n == 0:
				return hc, fmt.Errorf("host name %q has an empty label at offset %d", string(name), i)
			case n > 63:
				return hc, fmt.Errorf("host name %q has a label of %d bytes, longer than 63", string(name), n)
			}
			if i == len(name) {
				hc.numericEnd = isNumericLabel(name[start:])
			}
			start = i + 1
			continue
		}
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_':
		case 'A' <= c && c <= 'Z':
			hc.upper = true
		default:
			return hc, fmt.Errorf("host name %q has byte 0x%02x at offset %d; only letters, digits, '-', '_' and '.' are allowed", string(name), c, i)
		}
	}
	return hc, nil
}

// isNumericLabel reports whether a label reads as a number the way URL
// parsers read IPv4 parts: decimal digits, or 0x followed by hex digits.
func isNumericLabel(l []byte) bool {
	if len(l) >= 2 && l[0] == '0' && (l[1] == 'x' || l[1] == 'X') {
		for _, c := range l[2:] {
			if !isHex(c) {
				return false
			}
		}
		return true
	}
	for _, c := range l {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// lowerString returns b as a string in lower case, with one allocation.
// b must be at most maxHostLen bytes when upper is true.
func lowerString(b []byte, upper bool) string {
	if !upper {
		return string(b)
	}
	var buf [maxHostLen]byte
	n := copy(buf[:], b)
	for i, c := range buf[:n] {
		if 'A' <= c && c <= 'Z' {
			buf[i] = c + 'a' - 'A'
		}
	}
	return string(buf[:n])
}
