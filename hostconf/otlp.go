package hostconf

import (
	"errors"
	"fmt"
	"os"

	"github.com/doorman-net/doorman/spec"
)

// OTLPFile holds the host-wide OTLP export default for every sandbox whose
// front door names no collector of its own (the keys of spec.OTLP).
const OTLPFile = "/etc/doorman/otlp.json"

// OTLP reads the host-wide OTLP export settings at path; none if the file
// is absent. An unreadable or invalid file is an error: a sandbox is not
// enforced with its export silently off.
func OTLP(path string) (spec.OTLP, error) {
	o, err := LoadOTLP(path)
	if errors.Is(err, os.ErrNotExist) {
		return spec.OTLP{}, nil
	}
	if err != nil {
		return o, fmt.Errorf("host-wide OTLP settings: %w", err)
	}
	return o, nil
}

// LoadOTLP reads the OTLP export settings in the file at path (the keys
// of spec.OTLP; any other key is an error). An empty or absent "endpoint"
// exports nothing; an absent file is an error matching os.ErrNotExist.
func LoadOTLP(path string) (spec.OTLP, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return spec.OTLP{}, fmt.Errorf("otlp settings: %w", err)
	}
	o, err := spec.ParseOTLP(data)
	if err != nil {
		return spec.OTLP{}, fmt.Errorf("otlp settings %s: %w", path, err)
	}
	return o, nil
}
