package spec

import (
	"fmt"
	"maps"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/doorman-net/doorman/internal/strictjson"
)

// OTLP is where a sandbox's proxy also exports its decision and DNS
// records, as OTLP/HTTP logs, with the keys of /etc/doorman/otlp.json:
//
//	{"endpoint": "https://otel.example.com:4318",
//	 "headers": {"Authorization": "Bearer …"}, "insecure": false, "queueSize": 1024}
//
// The zero value exports nothing. The state file and the proxy's config
// file hold it under "otlp", readable by their owner only: the headers
// often hold a token, which stays off every command line.
type OTLP struct {
	// Endpoint is the OTLP/HTTP collector: a URL ("http://127.0.0.1:4318",
	// "https://otel.example.com:4318/custom/v1/logs"), whose scheme decides
	// TLS and whose path, when empty, becomes /v1/logs; or host:port, which
	// uses TLS unless Insecure is set. Empty disables export.
	Endpoint string `json:"endpoint"`
	// Insecure sends plaintext HTTP to a host:port Endpoint. With a URL it
	// may only agree with the scheme: "https://…" with Insecure is an error.
	Insecure bool `json:"insecure,omitempty"`
	// Headers are sent with every export request (e.g. authorization).
	Headers map[string]string `json:"headers,omitempty"`
	// QueueSize bounds the records accepted but not yet exported; 0 is
	// the exporter's default (see package otlplog).
	QueueSize int `json:"queueSize,omitempty"`
}

// logsPath is the OTLP/HTTP path for logs, used when the endpoint names
// none.
const logsPath = "/v1/logs"

// SettingError is an OTLP setting Validate refuses: Key names it as the
// keys of OTLP do ("endpoint", "insecure", "queueSize", "headers"),
// Value is the value as written, Why says why. A front door whose keys
// are others (a conflist's otlpEndpoint) renames Key.
type SettingError struct {
	Key, Value, Why string
}

func (e *SettingError) Error() string { return fmt.Sprintf("%s %s: %s", e.Key, e.Value, e.Why) }

// ParseOTLP decodes the JSON form of o (the keys above; any other is an
// error) and checks it. An empty or absent endpoint exports nothing.
func ParseOTLP(data []byte) (OTLP, error) {
	var o OTLP
	if err := strictjson.Decode("", data, &o); err != nil {
		return OTLP{}, err
	}
	if err := o.Validate(); err != nil {
		return OTLP{}, err
	}
	return o, nil
}

// Validate reports the first setting of o that the exporter would
// refuse, as a *SettingError naming it. An o without Endpoint is valid.
func (o OTLP) Validate() error {
	if o.Endpoint == "" {
		return nil
	}
	if o.QueueSize < 0 {
		return &SettingError{Key: "queueSize", Value: strconv.Itoa(o.QueueSize), Why: "must not be negative"}
	}
	for _, k := range slices.Sorted(maps.Keys(o.Headers)) {
		if k == "" || strings.ContainsAny(k, " \t\r\n:") {
			return &SettingError{Key: "headers", Value: strconv.Quote(k), Why: "not a valid header name"}
		}
	}
	_, err := o.URL()
	return err
}

// URL is the full URL export requests go to, so that the exporter needs
// no default of its own (and takes none from OTEL_EXPORTER_OTLP_*
// variables).
func (o OTLP) URL() (*url.URL, error) {
	endpoint := o.Endpoint
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
			if o.Insecure {
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
	if o.Insecure {
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
