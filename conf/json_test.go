package conf

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestParseJSON(t *testing.T) {
	tests := []struct {
		in    string
		mode  Mode
		hosts string // canonical entries joined by spaces
	}{
		{`{"mode": "allowlist", "allowedHosts": ["api.example.com", "*.github.com"]}`, ModeAllowlist, "api.example.com *.github.com"},
		{`{"cniVersion": "1.0.0", "name": "net", "type": "doorman", "mode": "open", "allowedHosts": ["X.com:443"], "prevResult": {"ips": []}}`, ModeOpen, "x.com:443"},
		{`{"allowedHosts": ["x.com"]}`, ModeAllowlist, "x.com"}, // missing mode
		{`{"mode": null, "allowedHosts": ["x.com"]}`, ModeAllowlist, "x.com"},
		{`{"mode": " NONE "}`, ModeNone, ""},
		{`{}`, ModeAllowlist, ""}, // empty allowlist: denies everything
		{`{"mode": "allowlist", "allowedHosts": null}`, ModeAllowlist, ""},
		{`{"mode": "allowlist", "allowedHosts": []}`, ModeAllowlist, ""},
		{`{"allowedHosts": ["10.0.0.0/8", "[2001:db8::1]:443"]}`, ModeAllowlist, "10.0.0.0/8 [2001:db8::1]:443"},
	}
	for _, tt := range tests {
		p, err := ParseJSON([]byte(tt.in))
		if err != nil {
			t.Errorf("ParseJSON(%s): %v", tt.in, err)
			continue
		}
		if p.Mode != tt.mode || strings.Join(p.Hosts(), " ") != tt.hosts {
			t.Errorf("ParseJSON(%s) = %v, want %s [%s]", tt.in, p, tt.mode, tt.hosts)
		}
	}
}

func TestParseJSONErrors(t *testing.T) {
	tests := []struct {
		in   string
		want []string // substrings of the error
	}{
		{``, []string{"policy JSON"}},
		{`[]`, []string{"policy JSON"}},
		{`{"mode": "allowlist"`, []string{"policy JSON"}},
		{`{"allowedHosts": "x.com"}`, []string{"policy JSON", "allowedHosts"}},
		{`{"allowedHosts": [1]}`, []string{"policy JSON", "allowedHosts"}},
		{`{"mode": 1}`, []string{"policy JSON", "mode"}},
		{`{"mode": ""}`, []string{`mode: invalid mode ""`}},
		{`{"mode": "deny", "allowedHosts": ["x.com"]}`, []string{`invalid mode "deny"`, "none, allowlist, open"}},
		{`{"allowedHosts": ["ok.com", "*", "x.com:9-3"]}`, []string{
			`allowedHosts[1]: "*": a bare * is not allowed (use mode: open)`,
			`allowedHosts[2]: "x.com:9-3": port range reversed`,
		}},
		{`{"mode": "bogus", "allowedHosts": [""]}`, []string{`invalid mode "bogus"`, `allowedHosts[0]: "": empty entry`}},
	}
	for _, tt := range tests {
		p, err := ParseJSON([]byte(tt.in))
		if err == nil || p != nil {
			t.Errorf("ParseJSON(%s) = %v, %v; want nil and an error", tt.in, p, err)
			continue
		}
		for _, want := range tt.want {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("ParseJSON(%s) error %q does not contain %q", tt.in, err, want)
			}
		}
	}
}

func TestPolicyJSONRoundTrip(t *testing.T) {
	p, err := NewPolicy(ModeOpen, []string{"Bücher.de.", "*.Example.com:443", "::ffff:10.0.0.0/104", "[2001:db8::/32]:8000-8999"})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"mode":"open","allowedHosts":["xn--bcher-kva.de","*.example.com:443","10.0.0.0/8","[2001:db8::/32]:8000-8999"]}`
	if string(data) != want {
		t.Errorf("json.Marshal = %s, want %s", data, want)
	}
	q, err := ParseJSON(data)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Equal(q) {
		t.Errorf("round trip: %v != %v", q, p)
	}
	// A Policy embedded in a larger configuration.
	var cfg struct {
		Type   string  `json:"type"`
		Policy *Policy `json:"policy"`
	}
	if err := json.Unmarshal([]byte(`{"type":"doorman","policy":`+string(data)+`}`), &cfg); err != nil {
		t.Fatal(err)
	}
	if !cfg.Policy.Equal(p) {
		t.Errorf("embedded: %v != %v", cfg.Policy, p)
	}
	err = json.Unmarshal([]byte(`{"policy":{"allowedHosts":["*"]}}`), &cfg)
	if err == nil || !strings.Contains(err.Error(), `"*": a bare * is not allowed`) {
		t.Errorf("embedded invalid policy: %v", err)
	}
}
