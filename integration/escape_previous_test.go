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

// TestEscapeRowsFailOnThePreviousRelease runs the CNI column of the
// escape suite against the doorman of previousRelease, built from this
// repository's history, and requires each of issue14Rows to measure an
// escape in at least one of its two columns: a row that measured 0 there
// could not tell the fix from its absence. (TestEscape requires the same
// rows to measure 0 against the doorman under test.)
func TestEscapeRowsFailOnThePreviousRelease(t *testing.T) {
	skipUnlessRoot(t)
	pluginDir := buildPreviousDoorman(t, previousRelease)
	bin := buildEscapeProbe(t)
	k := escapeCNIKind(t, bin, pluginDir, true, &escapeKind{name: "CNI sandbox, " + previousRelease[:7]}, nil, true)
	for _, id := range issue14Rows {
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
			t.Errorf("row %s measured nothing against %s (%s): it cannot tell the fix from its absence", id, previousRelease[:7], strings.Join(cells, "; "))
		} else {
			t.Logf("row %s against %s: %s", id, previousRelease[:7], strings.Join(cells, "; "))
		}
	}
}
