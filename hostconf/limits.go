package hostconf

import (
	"errors"
	"fmt"
	"os"

	"github.com/doorman-net/doorman/spec"
)

// LimitsFile holds the host-wide caps of every sandbox (the keys of
// spec.Limits); a CNI network's "limits" win over it key by key.
const LimitsFile = "/etc/doorman/limits.json"

// Limits reads the host-wide caps at path; none (the defaults) if the
// file is absent. An unreadable or invalid file, or an unknown key, is an
// error naming the file: a sandbox is not enforced with caps other than
// those its operator wrote.
func Limits(path string) (spec.Limits, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return spec.Limits{}, nil
	}
	if err != nil {
		return spec.Limits{}, fmt.Errorf("host-wide limits: %w", err)
	}
	l, err := spec.ParseLimits(data)
	if err != nil {
		return l, fmt.Errorf("host-wide limits %s: %w", path, err)
	}
	return l, nil
}
