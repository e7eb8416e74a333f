package integration

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// The benchmarks in this package compare paths side by side in one run,
// because the machines they run on are shared and noisy: a number from
// another run, another hour or another machine says little. Each comparison
// runs the paths in turn, rotating which goes first from round to round and
// reversing the order every other round (so that a slow drift of the
// machine, or what one path leaves behind, hurts no path more than
// another; see benchRotate), keeps
// every round's value, and reports the median with the minimum and maximum,
// and the ratio of the medians to the first path's (with the spread of the
// round-by-round ratios). Targets are printed as met or MISSED; a benchmark
// never fails on them.

// benchSpread is the median, minimum and maximum of a set of values.
type benchSpread struct {
	med, min, max float64
	n             int
}

func benchSpreadOf(xs []float64) benchSpread {
	if len(xs) == 0 {
		return benchSpread{med: math.NaN(), min: math.NaN(), max: math.NaN()}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return benchSpread{med: benchQuantile(s, 0.5), min: s[0], max: s[len(s)-1], n: len(s)}
}

// benchQuantile is the q-quantile of sorted (nearest rank; the median of an even
// count is the mean of the middle two).
func benchQuantile(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if q == 0.5 && n%2 == 0 {
		return (sorted[n/2-1] + sorted[n/2]) / 2
	}
	i := int(math.Ceil(q*float64(n))) - 1
	return sorted[min(max(i, 0), n-1)]
}

// benchPercentile returns the q-quantile of xs (which it does not modify).
func benchPercentile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return benchQuantile(s, q)
}

// benchPairedRatios divides b[i] by a[i] round by round: their spread says how
// much of a ratio is noise.
func benchPairedRatios(a, b []float64) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		if a[i] != 0 {
			out = append(out, b[i]/a[i])
		}
	}
	return out
}

// benchRotate runs round(r, p) for every round r and path p = 0..paths-1,
// rotating the order, and reversing it every other round: round 0 runs
// 0 1 2 3, round 1 runs 1 0 3 2, round 2 runs 2 3 0 1, round 3 runs
// 3 2 1 0. Each path then goes first in turn and follows a different
// path from one round to the next: what one path leaves behind (a relay
// that kept the CPUs busy, connections still closing) does not fall on
// the same path every round. (With rotation alone, each path always
// followed the same one: on one TLS stream the path after the bare relay
// measured 5-10% below the same binary placed after another doorman.)
func benchRotate(rounds, paths int, round func(r, p int)) {
	for r := range rounds {
		for i := range paths {
			if r%2 == 0 {
				round(r, (r+i)%paths)
			} else {
				round(r, ((r-i)%paths+paths)%paths)
			}
		}
	}
}

// benchTable is one benchmark's result table: a column per path, then the
// ratio of each other path to the first, and, where peers are set, the
// subject's ratio to the best of them. A row added again under the same
// metric replaces the old one (and a note under the same key), so a
// sub-benchmark that the testing package runs twice is reported once.
type benchTable struct {
	title string
	paths []string
	rows  []*benchRow
	notes [][2]string // key, text
	// subject and peers are path indexes: with peers set, every row whose
	// better is set gets the subject's ratio to the peer whose median is
	// best on that row.
	subject int
	peers   []int
}

// Which way a metric is better, for the ratio to the best peer.
const (
	benchLowerBetter  = -1
	benchHigherBetter = 1
)

// benchRow is one metric: per path, the values of every round (nil where
// the metric does not apply to the path).
type benchRow struct {
	metric string
	format string
	vals   [][]float64
	target string // rendered by verdict, "" for none
	better int    // benchLowerBetter, benchHigherBetter, or 0: no best peer
}

// bestPeer is the peer whose median is best on r (by r.better), and false
// where the table has no peers, r is not compared, or no peer has a value.
func (t *benchTable) bestPeer(r *benchRow) (int, bool) {
	best, found := 0, false
	for _, p := range t.peers {
		if r.better == 0 || r.vals[p] == nil {
			continue
		}
		if !found || float64(r.better)*(r.med(p)-r.med(best)) > 0 {
			best, found = p, true
		}
	}
	return best, found
}

// ratioToBest is the subject's median over the best peer's, NaN where
// there is no best peer.
func (t *benchTable) ratioToBest(r *benchRow) float64 {
	p, ok := t.bestPeer(r)
	if !ok {
		return math.NaN()
	}
	return r.med(t.subject) / r.med(p)
}

// beats reports whether the subject's median is better than every peer's
// on r (false where a peer has no value: nothing to beat is not a win).
func (t *benchTable) beats(r *benchRow, peers ...int) bool {
	if r.better == 0 || len(peers) == 0 {
		return false
	}
	for _, p := range peers {
		if r.vals[p] == nil || float64(r.better)*(r.med(t.subject)-r.med(p)) <= 0 {
			return false
		}
	}
	return true
}

// med is the median of path p, NaN where the row has no value for it.
func (r *benchRow) med(p int) float64 { return benchSpreadOf(r.vals[p]).med }

// ratio is the median of path p over the median of the first path.
func (r *benchRow) ratio(p int) float64 { return r.med(p) / r.med(0) }

// add adds (or replaces) the row metric with the per-round values vals
// (one slice per path, nil where not applicable), printed with format.
func (t *benchTable) add(metric, format string, vals ...[]float64) *benchRow {
	r := &benchRow{metric: metric, format: format, vals: vals}
	for len(r.vals) < len(t.paths) {
		r.vals = append(r.vals, nil)
	}
	for i, old := range t.rows {
		if old.metric == metric {
			t.rows[i] = r
			return r
		}
	}
	t.rows = append(t.rows, r)
	return r
}

// note adds a line under the table.
func (t *benchTable) note(key, format string, args ...any) {
	text := fmt.Sprintf(format, args...)
	for i, n := range t.notes {
		if n[0] == key {
			t.notes[i][1] = text
			return
		}
	}
	t.notes = append(t.notes, [2]string{key, text})
}

// benchVerdict renders a target and whether it is met.
func benchVerdict(target string, met bool) string {
	if met {
		return target + ": met"
	}
	return target + ": MISSED"
}

func (t *benchTable) header() []string {
	h := []string{"metric"}
	for _, p := range t.paths {
		h = append(h, p+" med [min..max]")
	}
	for _, p := range t.paths[1:] {
		h = append(h, p+"/"+t.paths[0]+" [rounds]")
	}
	if len(t.peers) > 0 {
		h = append(h, t.paths[t.subject]+"/best peer [rounds]")
	}
	return append(h, "target")
}

func (t *benchTable) cells(r *benchRow) []string {
	c := []string{r.metric}
	for _, v := range r.vals {
		if v == nil {
			c = append(c, "-")
			continue
		}
		s := benchSpreadOf(v)
		c = append(c, fmt.Sprintf(r.format+" ["+r.format+".."+r.format+"]", s.med, s.min, s.max))
	}
	for p := 1; p < len(t.paths); p++ {
		if r.vals[0] == nil || r.vals[p] == nil {
			c = append(c, "-")
			continue
		}
		pr := benchSpreadOf(benchPairedRatios(r.vals[0], r.vals[p]))
		c = append(c, fmt.Sprintf("%.2fx [%.2f..%.2f]", r.ratio(p), pr.min, pr.max))
	}
	if len(t.peers) > 0 {
		if p, ok := t.bestPeer(r); ok && r.vals[t.subject] != nil {
			pr := benchSpreadOf(benchPairedRatios(r.vals[p], r.vals[t.subject]))
			c = append(c, fmt.Sprintf("%.2fx %s [%.2f..%.2f]", t.ratioToBest(r), t.paths[p], pr.min, pr.max))
		} else {
			c = append(c, "-")
		}
	}
	return append(c, r.target)
}

// String renders the table with aligned columns.
func (t *benchTable) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%s\n", t.title)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header(), "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(t.cells(r), "\t"))
	}
	tw.Flush()
	for _, n := range t.notes {
		fmt.Fprintf(&sb, "  * %s\n", n[1])
	}
	return sb.String()
}

// Markdown renders the table for docs/benchmarks.md.
func (t *benchTable) Markdown() string {
	var sb strings.Builder
	h := t.header()
	fmt.Fprintf(&sb, "| %s |\n|%s\n", strings.Join(h, " | "), strings.Repeat("---|", len(h)))
	for _, r := range t.rows {
		fmt.Fprintf(&sb, "| %s |\n", strings.Join(t.cells(r), " | "))
	}
	if len(t.notes) > 0 {
		sb.WriteString("\n")
	}
	for _, n := range t.notes {
		fmt.Fprintf(&sb, "- %s\n", n[1])
	}
	return sb.String()
}

// print writes the table once, in both forms, to standard output (the log
// of a benchmark that has sub-benchmarks is not shown).
func (t *benchTable) print() {
	fmt.Print(t.String() + "\n" + t.Markdown() + "\n")
}
