// Package droplog writes the decision lines of what a sandbox's
// host-side layer (package enforce/hostlayer) drops.
//
// That layer drops in the host's namespace, on the host end of the
// sandbox's link, so neither the proxy nor the DNS filter ever sees what
// it drops: UDP other than DNS to the sandbox's resolvers, packets from
// addresses or MACs that are not the sandbox's, anything else the
// sandbox sends outside the proxy. Every drop rule of a sandbox's chains
// counts what it drops and logs it to the sandbox's NFLOG group, at most
// hostlayer.LogRate packets a second per table (see hostlayer.LogRate).
//
// A Poller writes, for each logged packet, a connection line with verdict
// deny, the packet's source and destination (addr:port for TCP and UDP),
// its protocol, its ICMP type and code, and the reason "host-layer: " and
// the rule's comment; and every interval it reads the counters and writes
// one denials line (decisionlog.Denials) per rule for what the rule
// dropped beyond the packets it logged one by one. The lines of a rule
// add up to its counter: the counters are the exact totals, the packet
// lines the detail the rate limit lets through. Both count as denials
// wherever the log is read (`doorman ls`, `show`, `logs`).
//
// What the Poller has written for each rule is kept in a state file, so
// that a proxy that restarts (a new worker, the same rules) carries on
// from there rather than logging the counters' totals again. A rule
// installed anew (the layer re-applied) has a new handle, and its counter
// starts from zero.
package droplog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/doorman-net/doorman/internal/atomicfile"
	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/proxy/droplog/nflog"
)

// DefaultInterval is how often a Poller reads the counters.
const DefaultInterval = 2 * time.Second

// openEagerly is how long after it starts a Poller looks for the
// sandbox's NFLOG group every openRetry, rather than at every reading.
const (
	openEagerly = 5 * time.Second
	openRetry   = 50 * time.Millisecond
)

// ReasonPrefix begins the reason of every line a Poller writes.
const ReasonPrefix = "host-layer: "

// Count is what one drop rule has dropped since it was installed.
type Count struct {
	Table   string // the rule's table, e.g. "table inet doorman-host"
	Rule    string // the rule's comment: why it drops
	Handle  uint64 // the rule's handle: a rule installed anew has a new one
	Mark    uint32 // the mark its logged packets carry (0: it logs none)
	Packets uint64
}

// Reader reads a sandbox's drop counters.
type Reader interface {
	ReadDrops() ([]Count, error)
}

// Logged is one packet a drop rule logged: the prefix of its table's log
// statement (the table's name, as Count.Table), the mark its rule set,
// and its bytes from the network header on.
type Logged struct {
	Table   string
	Mark    uint32
	HWProto uint16 // the ethertype
	Payload []byte
}

// Packets is the sandbox's NFLOG group.
type Packets interface {
	// Receive returns the packets logged since the last call, waiting
	// for one until deadline; when none came it returns an error that
	// wraps os.ErrDeadlineExceeded.
	Receive(deadline time.Time) ([]Logged, error)
	Close() error
}

// Config says whose drops to log, and where.
type Config struct {
	Sandbox  string
	Reader   Reader
	Logger   *slog.Logger
	Interval time.Duration // 0 means DefaultInterval
	// OpenPackets opens the sandbox's NFLOG group; nil means no packet
	// lines, only the counters' denials lines, and so does a nil
	// Packets (the sandbox has no group yet). Opening is tried again
	// at every reading until it works (a predecessor may still hold
	// the group).
	OpenPackets func() (Packets, error)
	// StateFile keeps what has been logged of each rule across
	// restarts; "" keeps it in memory only.
	StateFile string
}

// Poller logs a sandbox's host-layer drops. Make one with New.
type Poller struct {
	cfg Config
	// logged is how many of each rule's drops the log holds, in lines
	// and denials lines.
	logged map[ruleKey]uint64
	// marks finds the rule of a logged packet, from the last reading.
	marks   map[markKey]ruleKey
	at      time.Time
	dirty   bool
	packets Packets
	// pollErr is the last reading's error, openErr the last failure to
	// open the group (each nil once it worked again).
	pollErr, openErr error
}

type ruleKey struct {
	Table  string `json:"table"`
	Handle uint64 `json:"handle"`
	Rule   string `json:"rule"`
}

type markKey struct {
	table string
	mark  uint32
}

// New returns a Poller for cfg, carrying on from cfg.StateFile if it
// holds what an earlier Poller logged. An unreadable state file is an
// error: logging from zero would log its rules' drops again.
func New(cfg Config) (*Poller, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Poller{cfg: cfg, logged: map[ruleKey]uint64{}, marks: map[markKey]ruleKey{}}
	if err := p.load(); err != nil {
		return nil, err
	}
	return p, nil
}

// stateEntry is one rule in the state file.
type stateEntry struct {
	ruleKey
	Logged uint64 `json:"logged"`
}

func (p *Poller) load() error {
	if p.cfg.StateFile == "" {
		return nil
	}
	b, err := os.ReadFile(p.cfg.StateFile)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("droplog: read state: %w", err)
	}
	var entries []stateEntry
	if err := json.Unmarshal(b, &entries); err != nil {
		return fmt.Errorf("droplog: state file %s: %w", p.cfg.StateFile, err)
	}
	for _, e := range entries {
		p.logged[e.ruleKey] = e.Logged
	}
	return nil
}

// save writes the state file if anything changed since the last save.
// Counters live in the kernel, so the file need not outlive a reboot: it
// is replaced whole, without syncs.
func (p *Poller) save() error {
	if p.cfg.StateFile == "" || !p.dirty {
		return nil
	}
	entries := make([]stateEntry, 0, len(p.logged))
	for k, n := range p.logged {
		entries = append(entries, stateEntry{k, n})
	}
	b, err := json.Marshal(entries)
	if err != nil {
		return err
	}
	if err := atomicfile.Write(p.cfg.StateFile, bytes.NewReader(b), atomicfile.Options{Perm: 0o600}); err != nil {
		return fmt.Errorf("droplog: write state: %w", err)
	}
	p.dirty = false
	return nil
}

// Run logs until ctx is done, then reads the counters once more so that
// the last interval's drops are logged too. The last error of a read,
// of opening the group or of saving the state is returned once ctx is
// done; logging goes on meanwhile (the layer may come back).
func (p *Poller) Run(ctx context.Context) error {
	defer func() {
		if p.packets != nil {
			p.packets.Close()
		}
	}()
	next := time.Now()
	// The layer is usually applied while the proxy starts: the group is
	// looked for every openRetry at first, then at every reading.
	eager := time.Now().Add(openEagerly)
	for {
		if now := time.Now(); !now.Before(next) {
			p.openPackets()
			p.pollErr = p.Poll(now)
			next = now.Add(p.cfg.Interval)
		} else if p.packets == nil && now.Before(eager) {
			p.openPackets()
		}
		if ctx.Err() != nil {
			if err := p.Poll(time.Now()); err != nil {
				return err
			}
			return errors.Join(p.pollErr, p.openErr)
		}
		deadline := next
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		if p.packets == nil {
			if r := time.Now().Add(openRetry); r.Before(eager) && r.Before(deadline) {
				deadline = r
			}
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(deadline)):
			}
			continue
		}
		// Wake at least every 100ms to notice ctx.
		if d := time.Now().Add(100 * time.Millisecond); d.Before(deadline) {
			deadline = d
		}
		got, err := p.packets.Receive(deadline)
		p.logPackets(got, time.Now())
		switch {
		case err == nil, errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, nflog.ErrLost):
			// Lines lost, not drops: the counters still hold them,
			// and the next reading logs them in its denials lines.
		default:
			// The socket failed: open it again at the next reading.
			p.openErr = err
			p.packets.Close()
			p.packets = nil
		}
	}
}

// Open opens the sandbox's NFLOG group now, if it is not open, so that a
// caller can have the group bound before the sandbox sends anything:
// until then the layer's drops are only counted. Run tries again at every
// reading if it fails.
func (p *Poller) Open() { p.openPackets() }

// openPackets opens the group if it is not open.
func (p *Poller) openPackets() {
	if p.packets != nil || p.cfg.OpenPackets == nil {
		return
	}
	pk, err := p.cfg.OpenPackets()
	p.openErr = err
	if err == nil && pk != nil {
		p.packets = pk
	}
}

// drain reads the packets already logged, without waiting: those of
// drops the counters may already hold.
func (p *Poller) drain(now time.Time) {
	if p.packets == nil {
		return
	}
	for {
		got, err := p.packets.Receive(time.Now())
		p.logPackets(got, now)
		if err != nil || len(got) == 0 {
			return
		}
	}
}

// logPackets writes a line per logged packet and counts it as logged for
// its rule.
func (p *Poller) logPackets(got []Logged, now time.Time) {
	for _, g := range got {
		k, ok := p.marks[markKey{g.Table, g.Mark}]
		if !ok {
			// A rule installed since the last reading.
			_ = p.readMarks()
			if k, ok = p.marks[markKey{g.Table, g.Mark}]; !ok {
				continue // not a rule of this sandbox's chains: never logged
			}
		}
		f, err := ParseFlow(g.HWProto, g.Payload)
		if err != nil {
			f = Flow{Proto: "malformed", ICMPType: -1, ICMPCode: -1}
		}
		Line(p.cfg.Sandbox, k.Rule, f).Log(context.Background(), p.cfg.Logger)
		p.logged[k]++
		p.dirty = true
	}
	if len(got) > 0 {
		if err := p.save(); err != nil {
			p.pollErr = err
		}
	}
}

// Line is the decision line of one logged packet f dropped by the rule
// of comment rule.
func Line(sandbox, rule string, f Flow) decisionlog.HostDrop {
	return decisionlog.HostDrop{
		Sandbox: sandbox, Src: f.endpoint(f.Src, f.SrcPort), Dst: f.endpoint(f.Dst, f.DstPort),
		Proto: f.Proto, ICMPType: f.ICMPType, ICMPCode: f.ICMPCode, Reason: Reason(rule),
	}
}

// readMarks reads the counters for their marks only.
func (p *Poller) readMarks() error {
	counts, err := p.cfg.Reader.ReadDrops()
	if err != nil {
		return err
	}
	p.setMarks(counts)
	return nil
}

func (p *Poller) setMarks(counts []Count) {
	clear(p.marks)
	for _, c := range counts {
		if c.Mark != 0 {
			p.marks[markKey{c.Table, c.Mark}] = ruleKey{c.Table, c.Handle, c.Rule}
		}
	}
}

// Poll reads the counters once, then the packets logged meanwhile, and
// writes a denials line per rule whose counter holds more than the log
// does (since the last reading, or since zero the first time).
func (p *Poller) Poll(now time.Time) error {
	counts, err := p.cfg.Reader.ReadDrops()
	if err != nil {
		return err
	}
	p.setMarks(counts)
	// After the reading: every logged packet it counted is in the
	// socket by now (a rule counts a packet, then logs it, in the same
	// pass), so none of them is taken for unlogged.
	p.drain(now)
	first := p.at
	if first.IsZero() {
		first = now
	}
	live := make(map[ruleKey]bool, len(counts))
	for _, c := range counts {
		k := ruleKey{c.Table, c.Handle, c.Rule}
		live[k] = true
		done := p.logged[k]
		if c.Packets <= done {
			continue // logged one by one, maybe some ahead of this reading
		}
		p.logged[k] = c.Packets
		p.dirty = true
		decisionlog.Denials{
			Sandbox: p.cfg.Sandbox, Kind: decisionlog.KindConnection,
			Reason: Reason(c.Rule), Count: int64(c.Packets - done), First: first, Last: now,
		}.Log(context.Background(), p.cfg.Logger)
	}
	// Rules that are gone (the layer re-applied or removed) are
	// forgotten.
	for k := range p.logged {
		if !live[k] {
			delete(p.logged, k)
			p.dirty = true
		}
	}
	p.at = now
	return p.save()
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
