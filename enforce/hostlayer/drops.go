package hostlayer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/userdata"
	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/enforce/nft"
)

// Logging of drops. Every drop rule of a sandbox's chain counts what it
// drops, sets the packet's mark to the rule's number among the chain's
// drops (1, 2, ...) and goes to the sandbox's log chain in the same
// table, log-<key>, which logs the packet to the sandbox's NFLOG group,
// at most LogRate a second after a burst of LogBurst, and drops it:
//
//	chain sbx-<key>
//	    MATCH counter meta mark set N goto log-<key>   each drop rule
//	chain log-<key>
//	    limit rate 10/second burst 20 packets log prefix "TABLE" group G snaplen 128
//	    drop
//
// So the counters stay the exact totals, a flood costs the reader at most
// LogRate lines a second per table, and each sandbox's budget is its own:
// only its chain, reached through its own interfaces' elements (or, in
// table inet doorman-host-listen, its own listeners' ports), goes to its
// log chain, and the group, the prefix and the mark are set by the rules,
// never by what the packet carries.
const (
	// LogRate and LogBurst bound the packets each table's log chain of
	// a sandbox logs: LogRate a second, after a burst of LogBurst.
	LogRate  = 10
	LogBurst = 20
	// LogSnaplen is how many bytes of each packet are logged, from its
	// network header: enough for the IPv4 or IPv6 header, extension
	// headers and the ports or ICMP type.
	LogSnaplen = 128
	// LogGroupBase and LogGroupSpan are the NFLOG groups the layer
	// hands out, one per sandbox: LogGroupBase to
	// LogGroupBase+LogGroupSpan-1 (4096 to 65535: the low groups, where
	// ulogd and hand-written rules log, stay free). A namespace with more
	// sandboxes than that refuses the next one.
	LogGroupBase = 0x1000
	LogGroupSpan = 0x10000 - LogGroupBase

	logChainPrefix = "log-"
	// setLogGroups is table inet doorman-host's map from each sandbox's
	// NFLOG group to its chain: which groups are taken, and by whom. No
	// rule looks it up.
	setLogGroups = "log-groups"
)

func logChainName(key string) string { return logChainPrefix + key }

// logChainOf is the log chain of the sandbox of chain sbx-<key>.
func logChainOf(chain string) string { return logChainName(strings.TrimPrefix(chain, chainPrefix)) }

// hasDrops reports whether rules drop anything.
func hasDrops(rules []nft.RuleSpec) bool {
	return slices.ContainsFunc(rules, isDrop)
}

func isDrop(r nft.RuleSpec) bool {
	n := len(r.Exprs)
	if n == 0 {
		return false
	}
	v, ok := r.Exprs[n-1].(*expr.Verdict)
	return ok && v.Kind == expr.VerdictDrop
}

// counted is rules with every drop verdict of sandbox key's chain
// replaced by a counter, the rule's mark and a goto to the log chain:
// what the layer drops for a sandbox is counted in the sandbox's own
// chain, so that ReadDrops can tell whose it was and why, and logged
// there, so that the sandbox's NFLOG group gets it (see LogRate).
func counted(rules []nft.RuleSpec, key string) []nft.RuleSpec {
	out := make([]nft.RuleSpec, len(rules))
	mark := uint32(0)
	for i, r := range rules {
		out[i] = r
		if !isDrop(r) {
			continue
		}
		mark++
		n := len(r.Exprs)
		out[i].Exprs = slices.Concat(r.Exprs[:n-1:n-1], markAndLog(mark, key))
	}
	return out
}

// markAndLog is `counter meta mark set MARK goto log-<key>`.
func markAndLog(mark uint32, key string) []expr.Any {
	return slices.Concat([]expr.Any{&expr.Counter{}}, markSet(mark),
		[]expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: logChainName(key)}})
}

// markSet is `meta mark set MARK`.
func markSet(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: nft.Reg, Data: binaryutil.NativeEndian.PutUint32(mark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: nft.Reg},
	}
}

// markIs is `meta mark MARK`.
func markIs(mark uint32) []expr.Any {
	return nft.Load(&expr.Meta{Key: expr.MetaKeyMARK, Register: nft.Reg}, nft.Eq(binaryutil.NativeEndian.PutUint32(mark)))
}

// logRules is the log chain of a sandbox in table l, logging to group. In
// table bridge doorman-host it first counts, for the sandbox, the shared
// forward chain's drops of what its ports send, by their marks (see
// sharedPortDrops).
func (l layout) logRules(group uint16) []nft.RuleSpec {
	var rules []nft.RuleSpec
	if l.table.Family == nftables.TableFamilyBridge {
		for _, d := range sharedPortDropSpecs() {
			rules = append(rules, nft.Rule(d.comment, markIs(d.mark), []expr.Any{&expr.Counter{}}))
		}
	}
	return append(rules,
		nft.Rule(fmt.Sprintf("drops are logged to nflog group %d, at most %d a second", group, LogRate),
			[]expr.Any{
				&expr.Limit{Type: expr.LimitTypePkts, Rate: LogRate, Unit: expr.LimitTimeSecond, Burst: LogBurst},
				&expr.Log{
					Key:     1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX | 1<<unix.NFTA_LOG_SNAPLEN,
					Group:   group,
					Data:    []byte(l.String()),
					Snaplen: LogSnaplen,
				},
			}),
		nft.Rule("the sandbox's drops are dropped", nft.Drop()),
	)
}

// pickLogGroup returns sandbox key's NFLOG group: the one the map
// setLogGroups of table inet doorman-host (current, see readSets) gives
// it, or else the first free one from a hash of its key on.
func pickLogGroup(key string, current []element) (uint16, error) {
	own := chainName(key)
	taken := map[uint16]bool{}
	for _, e := range current {
		if len(e.key) < 2 {
			continue
		}
		g := binary.BigEndian.Uint16(e.key)
		if e.chain == own {
			return g, nil
		}
		taken[g] = true
	}
	h := fnv.New32a()
	h.Write([]byte(key))
	start := h.Sum32() % LogGroupSpan
	for i := range uint32(LogGroupSpan) {
		g := uint16(LogGroupBase + (start+i)%LogGroupSpan)
		if !taken[g] {
			return g, nil
		}
	}
	return 0, fmt.Errorf("no free nflog group for its drops: all %d from %d are taken", LogGroupSpan, LogGroupBase)
}

// ownLogGroup returns the group setLogGroups gives sandbox key.
func ownLogGroup(key string, current []element) (uint16, bool) {
	for _, e := range current {
		if e.chain == chainName(key) && len(e.key) >= 2 {
			return binary.BigEndian.Uint16(e.key), true
		}
	}
	return 0, false
}

// logGroupKey is a key of setLogGroups: the group, as a big-endian
// inet_service.
func logGroupKey(g uint16) []byte { return binaryutil.BigEndian.PutUint16(g) }

// Drop is what one drop rule of a sandbox's chains has dropped since
// Apply installed it.
type Drop struct {
	Table   string // the rule's table, as "table inet doorman-host"
	Rule    string // the rule's comment: why it drops
	Handle  uint64 // the rule's handle: a rule installed anew has a new one
	Mark    uint32 // the mark it sets on what it drops (its logged packets carry it)
	Packets uint64
	Bytes   uint64
}

// ReadDrops returns the counters of the drop rules in the sandbox key's
// chains of the layer in the namespace at nsPath, in table and rule
// order. A table or chain that is not there has no drops: a sandbox
// without the layer, or one removed meanwhile, reads as none.
func ReadDrops(nsPath, key string) ([]Drop, error) {
	drops, err := readDrops(nsPath, key)
	if err != nil {
		return nil, fmt.Errorf("hostlayer: read drops of sandbox %s in %s: %w", key, nsPath, err)
	}
	return drops, nil
}

func readDrops(nsPath, key string) ([]Drop, error) {
	// Without the layer's lock: a listing sees each batch whole or not
	// at all, and the proxy, which calls this, must never wait for a
	// change of the layer that may itself be waiting for the proxy to
	// stop.
	n, err := nft.OpenNetNS(nsPath)
	if err != nil {
		return nil, err
	}
	defer n.Close()
	var out []Drop
	for _, l := range layouts() {
		ok, err := nft.HasTable(n.Conn, l.table)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		rules, err := n.Conn.GetRules(l.table, l.sandboxChain(key))
		if err != nil {
			if nft.IsNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("%s: list chain %s: %w", l, chainName(key), err)
		}
		for _, r := range rules {
			if d, ok := dropOf(r); ok {
				d.Table = l.String()
				out = append(out, d)
			}
		}
		if l.table.Family != nftables.TableFamilyBridge {
			continue
		}
		// The shared drops counted in the log chain (see logRules).
		rules, err = n.Conn.GetRules(l.table, l.logChain(key))
		if err != nil {
			if nft.IsNotExist(err) {
				continue
			}
			return nil, fmt.Errorf("%s: list chain %s: %w", l, logChainName(key), err)
		}
		for _, r := range rules {
			if d, ok := sharedDropOf(r); ok {
				d.Table = l.String()
				out = append(out, d)
			}
		}
	}
	return out, nil
}

// sharedDropOf returns the counter of r if r is `meta mark MARK counter`.
func sharedDropOf(r *nftables.Rule) (Drop, bool) {
	if len(r.Exprs) != 3 {
		return Drop{}, false
	}
	m, ok1 := r.Exprs[0].(*expr.Meta)
	cmp, ok2 := r.Exprs[1].(*expr.Cmp)
	c, ok3 := r.Exprs[2].(*expr.Counter)
	if !ok1 || !ok2 || !ok3 || m.Key != expr.MetaKeyMARK || m.SourceRegister || cmp.Op != expr.CmpOpEq || len(cmp.Data) != 4 {
		return Drop{}, false
	}
	comment, _ := userdata.GetString(r.UserData, userdata.TypeComment)
	return Drop{Rule: comment, Handle: r.Handle, Mark: binaryutil.NativeEndian.Uint32(cmp.Data), Packets: c.Packets, Bytes: c.Bytes}, true
}

// dropOf returns the counter of r if r is a counted drop: it ends in
// `counter drop` or in markAndLog's expressions.
func dropOf(r *nftables.Rule) (Drop, bool) {
	n := len(r.Exprs)
	comment, _ := userdata.GetString(r.UserData, userdata.TypeComment)
	d := Drop{Rule: comment, Handle: r.Handle}
	if n < 2 {
		return Drop{}, false
	}
	v, ok := r.Exprs[n-1].(*expr.Verdict)
	if !ok {
		return Drop{}, false
	}
	switch {
	case v.Kind == expr.VerdictDrop:
		c, ok := r.Exprs[n-2].(*expr.Counter)
		if !ok {
			return Drop{}, false
		}
		d.Packets, d.Bytes = c.Packets, c.Bytes
	case v.Kind == expr.VerdictGoto && n >= 4:
		c, ok1 := r.Exprs[n-4].(*expr.Counter)
		imm, ok2 := r.Exprs[n-3].(*expr.Immediate)
		m, ok3 := r.Exprs[n-2].(*expr.Meta)
		if !ok1 || !ok2 || !ok3 || m.Key != expr.MetaKeyMARK || !m.SourceRegister || len(imm.Data) != 4 {
			return Drop{}, false
		}
		d.Packets, d.Bytes = c.Packets, c.Bytes
		d.Mark = binaryutil.NativeEndian.Uint32(imm.Data)
	default:
		return Drop{}, false
	}
	return d, true
}

// ErrNoLogGroup is returned (wrapped) by ReadLogGroup when the sandbox
// has no NFLOG group: no layer, or one installed by a release that did
// not log drops.
var ErrNoLogGroup = errors.New("the sandbox has no nflog group")

// ReadLogGroup returns the NFLOG group sandbox key's drops are logged to
// in the layer of the namespace at nsPath (see LogRate).
func ReadLogGroup(nsPath, key string) (uint16, error) {
	g, err := readLogGroup(nsPath, key)
	if err != nil {
		return 0, fmt.Errorf("hostlayer: read the nflog group of sandbox %s in %s: %w", key, nsPath, err)
	}
	return g, nil
}

func readLogGroup(nsPath, key string) (uint16, error) {
	n, err := nft.OpenNetNS(nsPath)
	if err != nil {
		return 0, err
	}
	defer n.Close()
	l := inetLayout()
	ok, err := nft.HasTable(n.Conn, l.table)
	if err != nil {
		return 0, err
	}
	if !ok {
		return 0, ErrNoLogGroup
	}
	sets, err := n.Conn.GetSets(l.table)
	if err != nil {
		return 0, fmt.Errorf("list sets: %w", err)
	}
	if !slices.ContainsFunc(sets, func(s *nftables.Set) bool { return s.Name == setLogGroups }) {
		return 0, ErrNoLogGroup
	}
	i := slices.IndexFunc(l.sets, func(ss setSpec) bool { return ss.name == setLogGroups })
	els, err := n.Conn.GetSetElements(l.set(l.sets[i]))
	if err != nil {
		return 0, fmt.Errorf("read set %s: %w", setLogGroups, err)
	}
	for _, e := range els {
		if jumpTarget(e.Val) == chainName(key) && len(e.Key) >= 2 {
			return binary.BigEndian.Uint16(e.Key), nil
		}
	}
	return 0, ErrNoLogGroup
}
