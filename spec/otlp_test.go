package spec

import (
	"strings"
	"testing"
)

// The JSON form of the export settings: an empty object exports nothing,
// and every bad value is refused naming its key.
func TestParseOTLP(t *testing.T) {
	o, err := ParseOTLP([]byte(`{"endpoint": "otel.example.com:4318", "insecure": true,
		"headers": {"Authorization": "Bearer t0ken"}, "queueSize": 64}`))
	if err != nil {
		t.Fatal(err)
	}
	if o.Endpoint != "otel.example.com:4318" || !o.Insecure || o.Headers["Authorization"] != "Bearer t0ken" || o.QueueSize != 64 {
		t.Errorf("ParseOTLP = %+v", o)
	}
	if o, err := ParseOTLP([]byte(`{}`)); err != nil || o.Endpoint != "" {
		t.Errorf("no endpoint: %+v, %v; want export disabled, no error", o, err)
	}
	for body, want := range map[string]string{
		`{"endpoint": "http://127.0.0.1:4318", "endpont": "x"}`:  `"endpont"`,
		`{"endpoint": "ftp://127.0.0.1:4318"}`:                   `"ftp://127.0.0.1:4318"`,
		`{"endpoint": "http://127.0.0.1:4318", "queueSize": -5}`: "-5",
		`{} {}`:       "more than one",
		`endpoint: x`: "invalid character",
	} {
		if _, err := ParseOTLP([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %s", body, err, want)
		}
	}
}

func TestEndpointURL(t *testing.T) {
	for _, c := range []struct {
		endpoint string
		insecure bool
		want     string
	}{
		{"http://127.0.0.1:4318", false, "http://127.0.0.1:4318/v1/logs"},
		{"http://127.0.0.1:4318/", false, "http://127.0.0.1:4318/v1/logs"},
		{"https://otel.example.com", false, "https://otel.example.com/v1/logs"},
		{"https://otel.example.com:4318/custom/v1/logs", false, "https://otel.example.com:4318/custom/v1/logs"},
		{"127.0.0.1:4318", false, "https://127.0.0.1:4318/v1/logs"},
		{"127.0.0.1:4318", true, "http://127.0.0.1:4318/v1/logs"},
		{"[2001:db8::1]:4318", true, "http://[2001:db8::1]:4318/v1/logs"},
		{"otel.example.com:4318", false, "https://otel.example.com:4318/v1/logs"},
	} {
		u, err := (OTLP{Endpoint: c.endpoint, Insecure: c.insecure}).URL()
		if err != nil {
			t.Errorf("%q insecure=%v: %v", c.endpoint, c.insecure, err)
			continue
		}
		if u.String() != c.want {
			t.Errorf("%q insecure=%v: %s, want %s", c.endpoint, c.insecure, u, c.want)
		}
	}
}
