package hostconf

import (
	"errors"
	"fmt"
	"os"

	"github.com/doorman-net/doorman/proxy/otlplog"
)

// OTLPFile holds the host-wide OTLP export default for every sandbox whose
// front door names no collector of its own (see otlplog.LoadFile for its
// keys).
const OTLPFile = "/etc/doorman/otlp.json"

// OTLP reads the host-wide OTLP export settings at path; none if the file
// is absent. An unreadable or invalid file is an error: a sandbox is not
// enforced with its export silently off.
func OTLP(path string) (otlplog.Config, error) {
	c, err := otlplog.LoadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return otlplog.Config{}, nil
	}
	if err != nil {
		return c, fmt.Errorf("host-wide OTLP settings: %w", err)
	}
	return c, nil
}
