package otlplog

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults for the zero values of Config.
const (
	// DefaultQueueSize bounds the records held for export when
	// Config.QueueSize is 0. The SDK allocates the whole queue up front,
	// about 600 bytes a record: 1024 is some 600 KiB per proxy, and ten
	// seconds of 100 connections a second while the collector stalls.
	DefaultQueueSize = 1024
	// DefaultExportTimeout bounds one export when Config.ExportTimeout is 0.
	DefaultExportTimeout = 5 * time.Second
	// DefaultReportInterval is how often dropped records are reported when
	// Config.ReportInterval is 0.
	DefaultReportInterval = 30 * time.Second
)

// logsPath is the OTLP/HTTP path for logs, used when the endpoint names
// none.
const logsPath = "/v1/logs"

// Config says where and how records are exported. The zero value exports
// nothing.
type Config struct {
	// Endpoint is the OTLP/HTTP collector: a URL ("http://127.0.0.1:4318",
	// "https://otel.example.com:4318/custom/v1/logs"), whose scheme decides
	// TLS and whose path, when empty, becomes /v1/logs; or host:port, which
	// uses TLS unless Insecure is set. Empty disables export.
	Endpoint string
	// Insecure sends plaintext HTTP to a host:port Endpoint. With a URL it
	// may only agree with the scheme: "https://…" with Insecure is an error.
	Insecure bool
	// Headers are sent with every export request (e.g. authorization).
	Headers map[string]string
	// Sandbox is the sandbox id, exported as the resource attribute
	// doorman.sandbox.
	Sandbox string
	// QueueSize bounds the records accepted but not yet exported,
	// including those of an export in flight; records beyond it are
	// dropped and counted. 0 means DefaultQueueSize.
	QueueSize int
	// ExportTimeout bounds one export request, retries included. 0 means
	// DefaultExportTimeout.
	ExportTimeout time.Duration
	// ReportInterval is how often a line with message "otlp" reports
	// dropped records, when there are new ones. 0 means
	// DefaultReportInterval.
	ReportInterval time.Duration
}

// withDefaults returns c with its zero fields set to the defaults.
func (c Config) withDefaults() Config {
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.ExportTimeout == 0 {
		c.ExportTimeout = DefaultExportTimeout
	}
	if c.ReportInterval == 0 {
		c.ReportInterval = DefaultReportInterval
	}
	return c
}

// Validate reports the first setting of c that NewHandler would refuse,
// naming it: for callers (a CNI config, a hook flag) that want to fail
// before a proxy is started. A c without Endpoint is valid.
func (c Config) Validate() error {
	if c.Endpoint == "" {
		return nil
	}
	if err := c.withDefaults().validate(); err != nil {
		return err
	}
	_, err := endpointURL(c.Endpoint, c.Insecure)
	return err
}

// SettingError is a setting Validate refuses: Key names it as FileConfig
// does ("endpoint", "insecure", "queueSize", "headers" followed by the
// header's name), Value is the value as written, Why says why. A front
// door whose keys are others (a conflist's otlpEndpoint) renames Key.
type SettingError struct {
	Key, Value, Why string
}

func (e *SettingError) Error() string { return fmt.Sprintf("%s %s: %s", e.Key, e.Value, e.Why) }

// validate checks the numbers and headers of c (after withDefaults).
func (c Config) validate() error {
	if c.QueueSize < 0 {
		return &SettingError{Key: "queueSize", Value: strconv.Itoa(c.QueueSize), Why: "must not be negative"}
	}
	if c.ExportTimeout < 0 {
		return &SettingError{Key: "exportTimeout", Value: c.ExportTimeout.String(), Why: "must not be negative"}
	}
	if c.ReportInterval < 0 {
		return &SettingError{Key: "reportInterval", Value: c.ReportInterval.String(), Why: "must not be negative"}
	}
	for _, k := range slices.Sorted(maps.Keys(c.Headers)) {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return &SettingError{Key: "headers", Value: strconv.Quote(k), Why: "not a valid header name"}
		}
	}
	return nil
}

// endpointURL turns Config.Endpoint into the full URL export requests go
// to, so that the exporter needs no default of its own (and takes none
// from OTEL_EXPORTER_OTLP_* variables).
func endpointURL(endpoint string, insecure bool) (*url.URL, error) {
	bad := func(why string) error {
		return &SettingError{Key: "endpoint", Value: strconv.Quote(endpoint), Why: why + " (want a URL like http://127.0.0.1:4318 or host:port)"}
	}
	if strings.Contains(endpoint, "://") {
		u, err := url.Parse(endpoint)
		if err != nil {
			return nil, bad(err.Error())
		}
		switch u.Scheme {
		case "http":
		case "https":
			if insecure {
				return nil, bad("https URL with insecure set: say http:// for plaintext")
			}
		default:
			return nil, bad("scheme must be http or https")
		}
		if u.Host == "" || u.Hostname() == "" {
			return nil, bad("no host")
		}
		if p := u.Port(); p != "" {
			if err := checkPort(p); err != nil {
				return nil, bad(err.Error())
			}
		}
		if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return nil, bad("user info, query and fragment are not allowed")
		}
		if u.Path == "" || u.Path == "/" {
			u.Path = logsPath
		}
		return u, nil
	}
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return nil, bad(err.Error())
	}
	if host == "" {
		return nil, bad("no host")
	}
	if err := checkPort(port); err != nil {
		return nil, bad(err.Error())
	}
	scheme := "https"
	if insecure {
		scheme = "http"
	}
	return &url.URL{Scheme: scheme, Host: net.JoinHostPort(host, port), Path: logsPath}, nil
}

func checkPort(p string) error {
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", p)
	}
	return nil
}
