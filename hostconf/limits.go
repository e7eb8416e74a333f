package hostconf

import (
	"errors"
	"fmt"
	"os"

	"github.com/doorman-net/doorman/internal/strictjson"
	"github.com/doorman-net/doorman/proxy/proxyconf"
)

// LimitsFile holds the host-wide caps of every sandbox (the keys of
// proxyconf.Limits); a CNI network's "limits" win over it key by key.
const LimitsFile = "/etc/doorman/limits.json"

// Limits reads the host-wide caps at path; none (the defaults) if the
// file is absent. An unreadable or invalid file, or an unknown key, is an
// error naming the file: a sandbox is not enforced with caps other than
// those its operator wrote.
func Limits(path string) (proxyconf.Limits, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return proxyconf.Limits{}, nil
	}
	if err != nil {
		return proxyconf.Limits{}, fmt.Errorf("host-wide limits: %w", err)
	}
	l, err := ParseLimits(data)
	if err != nil {
		return l, fmt.Errorf("host-wide limits %s: %w", path, err)
	}
	return l, nil
}

// ParseLimits decodes caps in the keys of proxyconf.Limits, refusing
// unknown keys (a misspelt cap must not pass silently) and values that
// are no cap; each error names the key as limits.<key>, the value and
// why.
func ParseLimits(data []byte) (proxyconf.Limits, error) {
	var l proxyconf.Limits
	if err := strictjson.Decode("limits", data, &l); err != nil {
		return proxyconf.Limits{}, err
	}
	return l, l.Validate()
}
