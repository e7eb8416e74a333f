package conf

import (
	"strings"
	"testing"
)

// The flag, annotation and label spelling of rule set uses.
func TestParseRuleSetList(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []RuleSetUse
		err  string // in the error
	}{
		{in: "closed-book", want: []RuleSetUse{{"closed-book", SetDeny}}},
		{in: " closed-book : STRIP ,", want: []RuleSetUse{{"closed-book", SetStrip}}},
		{in: "closed-book:probe", want: []RuleSetUse{{"closed-book", SetProbe}}},
		{in: "", want: nil},
		{in: "closed-bok", err: `"closed-bok": ruleset: no rule set "closed-bok"`},
		{in: "closed-book:block", err: `"closed-book:block": ruleset closed-book: action "block": want deny, strip or probe`},
		{in: ":strip", err: `":strip": want NAME or NAME:ACTION`},
		{in: "closed-book,closed-book:strip", err: "ruleset closed-book: used twice"},
	} {
		got, err := ParseRuleSetList(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: err %v, want %q", c.in, err, c.err)
			}
			continue
		}
		if err != nil || len(got) != len(c.want) {
			t.Errorf("%q: %v %v, want %v", c.in, got, err, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%q: %v, want %v", c.in, got, c.want)
			}
		}
	}
}

// FuzzParseRuleSetList: what parses names shipped sets with a known
// action, once each, and reads back the same from its String form.
func FuzzParseRuleSetList(f *testing.F) {
	for _, s := range []string{"closed-book", "closed-book:strip, ", ",,closed-book : Probe", "x:y:z", "closed-book,closed-book"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		uses, err := ParseRuleSetList(s)
		if err != nil {
			return
		}
		var parts []string
		for _, u := range uses {
			if err := u.check(); err != nil {
				t.Fatalf("%q: %v accepted: %v", s, u, err)
			}
			parts = append(parts, u.Name+":"+u.Action)
		}
		again, err := ParseRuleSetList(strings.Join(parts, ","))
		if err != nil || len(again) != len(uses) {
			t.Fatalf("%q: %v does not read back: %v %v", s, uses, again, err)
		}
	})
}
