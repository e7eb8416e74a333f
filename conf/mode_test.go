package conf

import (
	"strings"
	"testing"
)

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{
		"none":          ModeNone,
		"allowlist":     ModeAllowlist,
		"open":          ModeOpen,
		"  AllowList\n": ModeAllowlist,
		"OPEN":          ModeOpen,
		"None ":         ModeNone,
	} {
		got, err := ParseMode(in)
		if err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestParseModeErrors(t *testing.T) {
	for _, in := range []string{"", "  ", "allow", "deny", "allowlist,open", "closed", "*"} {
		got, err := ParseMode(in)
		if err == nil {
			t.Errorf("ParseMode(%q) = %q, want an error", in, got)
			continue
		}
		msg := err.Error()
		for _, want := range []string{`"` + in + `"`, "none", "allowlist", "open"} {
			if !strings.Contains(msg, want) {
				t.Errorf("ParseMode(%q) error %q does not contain %q", in, msg, want)
			}
		}
	}
}
