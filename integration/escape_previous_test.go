package integration

import (
	"strings"
	"testing"
)

// previousRelease is the last commit before the fixes for the holes that
// issue14Rows measure: ICMP tunnels, DNS rebinding into private networks,
// neighbour spoofing on the bridge, and the plaintext HTTP desync and h2c
// upgrade.
const previousRelease = "1cea9776bd9b856f779fb241edf4850a5493d173"

// issue14Rows are the escape suite's rows for those holes.
var issue14Rows = []string{"icmp", "icmp-lan", "router-advert", "rebind", "arp-spoof", "ip-spoof", "http-desync", "h2c-upgrade"}

// issue24Previous is the last commit before the fixes of issue 24, whose
// rows issue24Rows are.
const issue24Previous = "8feb24a0848883375a1dac75813d736f8282143f"

// issue24Rows are the escape suite's rows for the holes of issue 24.
var issue24Rows = []string{
	"arp-trailer", "mld-aux", "nd-options", "l2-flood", // layer-2 channels between sandboxes
}

// fixedRows is each release before a round of fixes, with the rows that
// measure what the round fixed.
var fixedRows = []struct {
	release string
	rows    []string
}{
	{previousRelease, issue14Rows},
	{issue24Previous, issue24Rows},
}

// TestEscapeRowsFailOnThePreviousRelease runs the CNI column of the
// escape suite against the doorman of each release in fixedRows, built
// from this repository's history, and requires each of its rows to
// measure an escape in at least one of its two columns: a row that
// measured 0 there could not tell the fix from its absence. (TestEscape
// requires the same rows to measure 0 against the doorman under test.)
func TestEscapeRowsFailOnThePreviousRelease(t *testing.T) {
	skipUnlessRoot(t)
	bin := buildEscapeProbe(t)
	for _, f := range fixedRows {
		t.Run(f.release[:7], func(t *testing.T) {
			escapeRowsFailOn(t, bin, f.release, f.rows)
		})
	}
}

// escapeRowsFailOn runs the CNI kind against the doorman of release and
// fails unless every one of rows escaped in one of its columns.
func escapeRowsFailOn(t *testing.T, bin, release string, rows []string) {
	pluginDir := buildPreviousDoorman(t, release)
	k := escapeCNIKind(t, bin, pluginDir, true, &escapeKind{name: "CNI sandbox, " + release[:7]}, nil, true)
	for _, id := range rows {
		var cells []string
		escaped := false
		for _, col := range k.columns {
			for _, r := range col.results {
				if r.attempt.id != id {
					continue
				}
				cells = append(cells, col.mode.String()+": "+r.arrived.summary())
				escaped = escaped || !r.arrived.zero()
			}
		}
		if len(cells) == 0 {
			t.Errorf("row %s: not run", id)
		} else if !escaped {
			t.Errorf("row %s measured nothing against %s (%s): it cannot tell the fix from its absence", id, release[:7], strings.Join(cells, "; "))
		} else {
			t.Logf("row %s against %s: %s", id, release[:7], strings.Join(cells, "; "))
		}
	}
}
