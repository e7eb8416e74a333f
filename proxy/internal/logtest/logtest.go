// Package logtest compares the JSON lines a writer of the decision log
// wrote with golden ones, for the tests of those writers: the lines must
// stay byte for byte what they were, but for the fields that differ from
// run to run.
package logtest

import (
	"regexp"
	"strings"
	"testing"
)

// timeField is the time every line starts with.
var timeField = regexp.MustCompile(`"time":"[^"]*",`)

// Lines returns the lines of log without their time field, and with the
// value of each key in volatile (a number or a string) written as
// "key":_.
func Lines(log string, volatile ...string) []string {
	s := timeField.ReplaceAllString(strings.TrimSuffix(log, "\n"), "")
	for _, k := range volatile {
		re := regexp.MustCompile(`"` + regexp.QuoteMeta(k) + `":("(?:[^"\\]|\\.)*"|[-0-9.eE+]+)`)
		s = re.ReplaceAllString(s, `"`+k+`":_`)
	}
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// Check fails t unless got is want, line for line.
func Check(t testing.TB, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d\n got %s\nwant %s", i, got[i], want[i])
		}
	}
}
