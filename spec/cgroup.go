package spec

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/doorman-net/doorman/cgroup"
)

// The limits of a proxy's cgroup that a Spec does not set (see
// ProxyLimitsWithDefaults). A proxy idles
// at about 20 MiB (its supervisor at about 5) and a relayed connection
// costs it 15 to 22 KiB, so 256 MiB holds some ten thousand connections,
// well above the proxy's own default cap on them; it uses a few dozen
// threads; and its CPU share is a sibling's.
const (
	DefaultProxyMemory    = 256 << 20
	DefaultProxyPids      = 512
	DefaultProxyCPUWeight = 100
)

// Smallest limits a front door accepts: below them a proxy cannot start
// (a Go process and its threads), and a value there is more likely a unit
// forgotten ("256" for 256 MiB) than meant.
const (
	MinProxyMemory = 8 << 20
	MinProxyPids   = 16
)

// ProxyLimitsWithDefaults is l with the defaults above for its zero
// fields.
func ProxyLimitsWithDefaults(l cgroup.Limits) cgroup.Limits {
	if l.Memory == 0 {
		l.Memory = DefaultProxyMemory
	}
	if l.Pids == 0 {
		l.Pids = DefaultProxyPids
	}
	if l.CPUWeight == 0 {
		l.CPUWeight = DefaultProxyCPUWeight
	}
	return l
}

// ParseMemoryLimit parses a proxy memory limit given under key: a number
// of bytes, optionally with a binary unit (k, m, g, also written Ki, Mi,
// Gi, KiB, MiB, GiB, any case: "256Mi", "1g"), or "max" for none. "" is
// the default (0). The error is a *FieldError.
func ParseMemoryLimit(key, value string) (uint64, error) {
	v := strings.TrimSpace(value)
	if v == "" {
		return 0, nil
	}
	if strings.EqualFold(v, "max") {
		return cgroup.Max, nil
	}
	num := strings.TrimRightFunc(v, func(r rune) bool { return r < '0' || r > '9' })
	unit := strings.ToLower(strings.TrimSpace(v[len(num):]))
	shift := map[string]uint{"": 0, "b": 0, "k": 10, "ki": 10, "kib": 10, "m": 20, "mi": 20, "mib": 20, "g": 30, "gi": 30, "gib": 30}
	sh, ok := shift[unit]
	n, err := strconv.ParseUint(num, 10, 64)
	if !ok || err != nil || num == "" {
		return 0, &FieldError{Key: key, Value: value, Reason: `want bytes, with an optional unit k, m or g (powers of 1024: "256Mi", "1g"), or "max"`}
	}
	if n > cgroup.Max>>sh {
		return 0, &FieldError{Key: key, Value: value, Reason: "too large"}
	}
	n <<= sh
	if n < MinProxyMemory {
		return 0, &FieldError{Key: key, Value: value, Reason: fmt.Sprintf("below %d MiB, the least a proxy runs in (a unit missing? \"256Mi\")", MinProxyMemory>>20)}
	}
	return n, nil
}

// ParsePidsLimit parses a proxy's limit on processes and threads given
// under key: a number, or "max" for none. "" is the default (0). The
// error is a *FieldError.
func ParsePidsLimit(key, value string) (uint64, error) {
	v := strings.TrimSpace(value)
	if v == "" {
		return 0, nil
	}
	if strings.EqualFold(v, "max") {
		return cgroup.Max, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, &FieldError{Key: key, Value: value, Reason: `want a number of processes and threads, or "max"`}
	}
	if n < MinProxyPids {
		return 0, &FieldError{Key: key, Value: value, Reason: fmt.Sprintf("below %d, the least a proxy and its supervisor run with", MinProxyPids)}
	}
	return n, nil
}

// ParseCPUWeight parses a proxy's CPU weight given under key: 1 to
// 10000, cgroup v2's scale (100 is a sibling's share). "" is the default
// (0). The error is a *FieldError.
func ParseCPUWeight(key, value string) (uint64, error) {
	v := strings.TrimSpace(value)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil || n < 1 || n > cgroup.MaxCPUWeight {
		return 0, &FieldError{Key: key, Value: value, Reason: fmt.Sprintf("want 1 to %d (100 is the share of a sibling cgroup)", cgroup.MaxCPUWeight)}
	}
	return n, nil
}

// ProxyLimitsConfig is the JSON form of a proxy's limits, under
// "proxyLimits" in a CNI conflist entry and in runtime.json:
// {"memory": "256Mi", "pids": 512, "cpuWeight": 100}. Each value may be a
// string or a number ("max" for no limit); an absent one is the default.
// The front doors decode it with package strictjson, which refuses a key
// it does not know, so that a misspelt limit does not pass silently.
type ProxyLimitsConfig struct {
	Memory    LimitValue `json:"memory,omitempty"`
	Pids      LimitValue `json:"pids,omitempty"`
	CPUWeight LimitValue `json:"cpuWeight,omitempty"`
}

// Limits parses c, naming each key as key.memory, key.pids and
// key.cpuWeight in errors (*FieldError).
func (c *ProxyLimitsConfig) Limits(key string) (cgroup.Limits, error) {
	var l cgroup.Limits
	if c == nil {
		return l, nil
	}
	var err error
	if l.Memory, err = ParseMemoryLimit(key+".memory", string(c.Memory)); err != nil {
		return l, err
	}
	if l.Pids, err = ParsePidsLimit(key+".pids", string(c.Pids)); err != nil {
		return l, err
	}
	if l.CPUWeight, err = ParseCPUWeight(key+".cpuWeight", string(c.CPUWeight)); err != nil {
		return l, err
	}
	return l, nil
}

// ProxyLimitsConfigOf is the JSON form of l (nil if l sets nothing): how
// `doorman run` passes its flags on in the conflist it writes.
func ProxyLimitsConfigOf(l cgroup.Limits) *ProxyLimitsConfig {
	if l == (cgroup.Limits{}) {
		return nil
	}
	v := func(n uint64) LimitValue {
		switch n {
		case 0:
			return ""
		case cgroup.Max:
			return "max"
		}
		return LimitValue(strconv.FormatUint(n, 10))
	}
	return &ProxyLimitsConfig{Memory: v(l.Memory), Pids: v(l.Pids), CPUWeight: v(l.CPUWeight)}
}

// LimitValue is a limit as JSON gives it, a number or a string, as text.
type LimitValue string

// UnmarshalJSON takes a JSON number or string.
func (v *LimitValue) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*v = LimitValue(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(data, &n); err != nil {
		return errors.New("want a number or a string")
	}
	*v = LimitValue(n.String())
	return nil
}
