package integration

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
)

// The benchmarks in this package compare two paths side by side in one run,
// because the machines they run on are shared and noisy: a number from
// another run, another hour or another machine says little. Each comparison
// alternates the paths (A B, B A, A B, …, so that a slow drift of the
// machine hurts neither side more), keeps every round's value, and reports
// the median with the minimum and maximum, and the ratio of the medians.
// Targets are printed as met or missed; a benchmark never fails on them.

// spread is the median, minimum and maximum of a set of values.
type spread struct {
	med, min, max float64
	n             int
}

func spreadOf(xs []float64) spread {
	if len(xs) == 0 {
		return spread{med: math.NaN(), min: math.NaN(), max: math.NaN()}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return spread{med: quantile(s, 0.5), min: s[0], max: s[len(s)-1], n: len(s)}
}

// quantile is the q-quantile of sorted (nearest rank; the median of an even
// count is the mean of the middle two).
func quantile(sorted []float64, q float64) float64 {
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

// percentile returns the q-quantile of xs (which it does not modify).
func percentile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return quantile(s, q)
}

// pairedRatios divides b[i] by a[i] round by round: the spread of these
// says how much of a ratio is noise.
func pairedRatios(a, b []float64) []float64 {
	var out []float64
	for i := range min(len(a), len(b)) {
		if a[i] != 0 {
			out = append(out, b[i]/a[i])
		}
	}
	return out
}

// directFirst says which path goes first in round i: direct in rounds 0,
// 3, 4, 7, 8, …, doorman in rounds 1, 2, 5, 6, … (ABBA order).
func directFirst(i int) bool { return (i+1)/2%2 == 0 }

// alternate runs direct(i) and doorman(i) for rounds 0..rounds-1 in ABBA
// order.
func alternate(rounds int, direct, doorman func(round int)) {
	for i := range rounds {
		if directFirst(i) {
			direct(i)
			doorman(i)
		} else {
			doorman(i)
			direct(i)
		}
	}
}

// benchTable collects the rows of one benchmark's result table. A row or
// note added again under the same metric (or key) replaces the old one, so
// a sub-benchmark that the testing package runs twice is reported once.
type benchTable struct {
	title string
	rows  [][]string
	notes [][2]string // key, text
}

func (t *benchTable) put(row []string) {
	for i, r := range t.rows {
		if r[0] == row[0] {
			t.rows[i] = row
			return
		}
	}
	t.rows = append(t.rows, row)
}

// comparisonHeader is the header of a direct-versus-doorman table.
var comparisonHeader = []string{"metric", "direct med [min..max]", "doorman med [min..max]", "doorman/direct [round min..max]", "target"}

// compare adds a row comparing the per-round values of both paths. target
// describes the goal of the ratio, met reports whether it holds (nil: no
// target).
func (t *benchTable) compare(metric, format string, direct, doorman []float64, target string, met func(ratio float64) bool) float64 {
	d, m := spreadOf(direct), spreadOf(doorman)
	ratio := m.med / d.med
	r := spreadOf(pairedRatios(direct, doorman))
	t.put([]string{
		metric, fmtSpread(format, d), fmtSpread(format, m),
		fmt.Sprintf("%.2fx [%.2f..%.2f]", ratio, r.min, r.max),
		verdict(target, met, ratio),
	})
	return ratio
}

// single adds a row that has a value for one column only (a doorman-only
// measurement, such as the proxy's memory).
func (t *benchTable) single(metric, direct, doorman, ratio, target string) {
	t.put([]string{metric, direct, doorman, ratio, target})
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

func fmtSpread(format string, s spread) string {
	return fmt.Sprintf(format+" ["+format+".."+format+"]", s.med, s.min, s.max)
}

// verdict renders a target and whether the measured value meets it.
func verdict(target string, met func(float64) bool, v float64) string {
	if target == "" || met == nil {
		return target
	}
	if met(v) {
		return target + ": met"
	}
	return target + ": MISSED"
}

// String renders the table with aligned columns.
func (t *benchTable) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\n%s\n", t.title)
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(comparisonHeader, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
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
	fmt.Fprintf(&sb, "| %s |\n|%s\n", strings.Join(comparisonHeader, " | "), strings.Repeat("---|", len(comparisonHeader)))
	for _, r := range t.rows {
		fmt.Fprintf(&sb, "| %s |\n", strings.Join(r, " | "))
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
