package otlplog

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/doorman-net/doorman/internal/strictjson"
)

// FileConfig is the JSON form of the export settings (its keys are the
// Key of a SettingError), as in a host-wide
// /etc/doorman/otlp.json or the per-sandbox file the enforcement core
// writes:
//
//	{"endpoint": "https://otel.example.com:4318",
//	 "headers": {"Authorization": "Bearer …"}, "insecure": false, "queueSize": 1024}
//
// A file keeps the headers (often a token) out of the proxy's command
// line, which every user of the host can read in /proc.
type FileConfig struct {
	Endpoint  string            `json:"endpoint"`
	Insecure  bool              `json:"insecure,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	QueueSize int               `json:"queueSize,omitempty"`
}

// LoadFile reads export settings from the JSON file at path (see
// FileConfig for the keys; any other key is an error). An empty or absent
// "endpoint" disables export. The caller sets Config.Sandbox.
func LoadFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("otlp settings: %w", err)
	}
	var f FileConfig
	if err := strictjson.Decode("", data, &f); err != nil {
		return Config{}, fmt.Errorf("otlp settings %s: %w", path, err)
	}
	c := Config{Endpoint: f.Endpoint, Insecure: f.Insecure, Headers: f.Headers, QueueSize: f.QueueSize}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("otlp settings %s: %w", path, err)
	}
	return c, nil
}

// WriteFile writes the settings of c that LoadFile reads (not Sandbox nor
// the timeouts) to path, readable by its owner only since headers often
// hold a token. It replaces path atomically.
func WriteFile(path string, c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	data, err := json.MarshalIndent(FileConfig{Endpoint: c.Endpoint, Insecure: c.Insecure, Headers: c.Headers, QueueSize: c.QueueSize}, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("otlp settings: %w", err)
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing to remove
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("otlp settings %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("otlp settings %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("otlp settings: %w", err)
	}
	return nil
}
