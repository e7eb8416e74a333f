// Package droplog writes the decision lines of what a sandbox's
// host-side layer (package enforce/hostlayer) drops.
//
// That layer drops in the host's namespace, on the host end of the
// sandbox's link, so neither the proxy nor the DNS filter ever sees what
// it drops: UDP other than DNS to the sandbox's resolvers, packets from
// addresses or MACs that are not the sandbox's, anything else the
// sandbox sends outside the proxy. Every drop rule of a sandbox's chains
// counts what it drops; a Poller reads those counters every interval and
// writes one denials line (decisionlog.Denials) per rule that dropped
// since the last reading, with the count, the interval, and the rule's
// reason, "host-layer: " and the rule's comment. Those lines count as
// denials wherever the log is read (`doorman ls`, `show`, `logs`).
//
// A counter says how many packets and why, not from where to where: the
// lines name the rule, not each packet's addresses.
package droplog

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/doorman-net/doorman/proxy/decisionlog"
)

// DefaultInterval is how often a Poller reads the counters.
const DefaultInterval = 2 * time.Second

// ReasonPrefix begins the reason of every line a Poller writes.
const ReasonPrefix = "host-layer: "

// Count is what one drop rule has dropped since it was installed.
type Count struct {
	Table   string // the rule's table, e.g. "table inet doorman-host"
	Rule    string // the rule's comment: why it drops
	Packets uint64
}

// Reader reads a sandbox's drop counters.
type Reader interface {
	ReadDrops() ([]Count, error)
}

// Config says whose drops to log, and where.
type Config struct {
	Sandbox  string
	Reader   Reader
	Logger   *slog.Logger
	Interval time.Duration // 0 means DefaultInterval
}

// Poller logs a sandbox's host-layer drops. Make one with New.
type Poller struct {
	cfg  Config
	last map[key]uint64
	at   time.Time
}

type key struct{ table, rule string }

// New returns a Poller for cfg.
func New(cfg Config) *Poller {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Poller{cfg: cfg, last: map[key]uint64{}}
}

// Run polls until ctx is done, then polls once more so that the last
// interval's drops are logged too. A failed read is returned once ctx is
// done; reads go on meanwhile (the layer may come back).
func (p *Poller) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	var lastErr error
	for {
		if err := p.Poll(time.Now()); err != nil {
			lastErr = err
		} else {
			lastErr = nil
		}
		select {
		case <-ctx.Done():
			if err := p.Poll(time.Now()); err != nil {
				return err
			}
			return lastErr
		case <-t.C:
		}
	}
}

// Poll reads the counters once and writes a denials line per rule whose
// counter rose since the last reading (or since zero, the first time). A
// counter that went down was installed anew (the layer re-applied): all
// it holds is new.
func (p *Poller) Poll(now time.Time) error {
	counts, err := p.cfg.Reader.ReadDrops()
	if err != nil {
		return err
	}
	first := p.at
	if first.IsZero() {
		first = now
	}
	seen := make(map[key]uint64, len(counts))
	for _, c := range counts {
		k := key{c.Table, c.Rule}
		seen[k] += c.Packets
	}
	for _, c := range counts {
		k := key{c.Table, c.Rule}
		n, ok := seen[k]
		if !ok {
			continue // summed into an earlier line of the same rule
		}
		delete(seen, k)
		prev := p.last[k]
		delta := n - prev
		if n < prev {
			delta = n
		}
		p.last[k] = n
		if delta == 0 {
			continue
		}
		decisionlog.Denials{
			Sandbox: p.cfg.Sandbox, Kind: decisionlog.KindConnection,
			Reason: Reason(c.Rule), Count: int64(delta), First: first, Last: now,
		}.Log(context.Background(), p.cfg.Logger)
	}
	p.at = now
	return nil
}

// Reason is the reason written for a drop by the rule of comment rule:
// ReasonPrefix and the comment without its trailing " is dropped" or
// " are dropped".
func Reason(rule string) string {
	for _, s := range []string{" is dropped", " are dropped"} {
		if r, ok := strings.CutSuffix(rule, s); ok {
			return ReasonPrefix + r
		}
	}
	return ReasonPrefix + rule
}
