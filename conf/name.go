package conf

import (
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// DNS limits on the ASCII form of a name (RFC 1035 section 2.3.4, without
// the root label's dot).
const (
	maxNameLen  = 253
	maxLabelLen = 63
)

// nameProfile is the IDNA lookup profile (UTS #46 mapping: case folding,
// width and compatibility mappings, Bidi and joiner rules, validation of
// xn-- labels), loosened in two ways that real DNS names need:
// '_' is allowed (_acme-challenge, _dmarc, some CDN and cloud names), and
// hyphens are not checked (names such as "r3---sn-abc.googlevideo.com" and
// labels that end in '-' exist). checkASCIIName restricts the result to
// letters, digits, '-' and '_' afterwards.
var nameProfile = idna.New(
	idna.MapForLookup(),
	idna.BidiRule(),
	idna.Transitional(false),
	idna.StrictDomainName(false),
	idna.CheckHyphens(false),
)

// NormalizeName returns the canonical ASCII form of a DNS name, the form
// in which entries store names and in which Entry.MatchName and
// Policy.MatchName expect them: lower case, internationalized labels in
// their xn-- (Punycode) form, one trailing dot dropped.
//
// It fails, naming the name and saying why, for an empty name, a name over
// 253 bytes or with a label over 63 bytes (both measured in ASCII form),
// an empty label (leading dot, "..", or more than one trailing dot), and
// any character other than letters, digits, '-' and '_' (IDNA mapping
// aside). A name made of digits and dots ("203.0.113.7") is a valid name
// here; no entry can match it by name, since ParseEntry reads it as an IP
// address.
func NormalizeName(name string) (string, error) {
	n, err := normalizeName(name)
	if err != nil {
		return "", fmt.Errorf("%q: %w", name, err)
	}
	return n, nil
}

// normalizeName is NormalizeName with errors that do not name the input,
// so that ParseEntry can name the whole entry instead.
func normalizeName(name string) (string, error) {
	if name == "" {
		return "", errors.New("empty name")
	}
	if !utf8.ValidString(name) {
		return "", errors.New("not valid UTF-8")
	}
	// Look for plain-ASCII mistakes first: IDNA would report them as a
	// disallowed rune or an invalid label, which says less.
	if err := checkASCIIName(strings.TrimSuffix(name, "."), true); err != nil {
		return "", err
	}
	a, err := nameProfile.ToASCII(name)
	if err != nil {
		return "", fmt.Errorf("not a valid international name: %v", err)
	}
	a = strings.TrimSuffix(a, ".")
	if err := checkASCIIName(a, false); err != nil {
		return "", err
	}
	if strings.Contains(a, "xn--") {
		// The ASCII form must be its own normal form, or a name would
		// change (or stop parsing) on its way through a policy file.
		// x/net/idna does not always agree with itself: it applies the
		// Bidi rule to a decoded xn-- label but can miss it for the
		// Unicode spelling ("0ℶ" gives "xn--0-2hc", which it rejects).
		b, err := nameProfile.ToASCII(a)
		if err != nil {
			return "", fmt.Errorf("not a valid international name: %v", err)
		}
		if b != a {
			return "", fmt.Errorf("not a valid international name: its ASCII form %s is not stable (gives %s)", a, b)
		}
	}
	return a, nil
}

// checkASCIIName checks a name without its trailing dot: labels non-empty,
// at most 63 bytes, the whole at most 253, and only letters, digits, '-'
// and '_'. With lenient set (before IDNA mapping) it lets non-ASCII bytes
// through and measures nothing, since mapping may still change them.
func checkASCIIName(name string, lenient bool) error {
	if name == "" {
		return errors.New("empty label")
	}
	if !lenient && len(name) > maxNameLen {
		return fmt.Errorf("name is %d bytes long, longer than %d", len(name), maxNameLen)
	}
	for label := range strings.SplitSeq(name, ".") {
		if label == "" {
			return errors.New("empty label")
		}
		if !lenient && len(label) > maxLabelLen {
			return fmt.Errorf("label %q is %d bytes long, longer than %d", label, len(label), maxLabelLen)
		}
		for _, r := range label {
			if err := checkNameRune(r, lenient); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkNameRune allows letters, digits, '-' and '_' (and, when lenient,
// anything outside ASCII, for IDNA to judge).
func checkNameRune(r rune, lenient bool) error {
	switch {
	case 'a' <= r && r <= 'z', '0' <= r && r <= '9', r == '-', r == '_':
		return nil
	case 'A' <= r && r <= 'Z':
		if lenient {
			return nil
		}
	case r >= 0x80 && lenient:
		return nil
	case r == '*':
		return errors.New("wildcard only allowed as the whole first label, as in *.example.com")
	case r == '/' || r == '?' || r == '@' || r == '#':
		return fmt.Errorf("bad character %q in name: give the host, not a URL", r)
	case r == ':':
		return fmt.Errorf("bad character %q in name", r)
	}
	return fmt.Errorf("bad character %q in name: names may hold letters, digits, '-' and '_'", r)
}
