package spec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/cgroup"
	"github.com/doorman-net/doorman/internal/strictjson"
)

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]uint64{
		"": 0, "max": cgroup.Max, "MAX": cgroup.Max, "268435456": 256 << 20,
		"256Mi": 256 << 20, "256MiB": 256 << 20, "256m": 256 << 20, "256M": 256 << 20, " 1g ": 1 << 30, "1Gi": 1 << 30,
		"16384k": 16 << 20, "16384KiB": 16 << 20,
	} {
		if got, err := ParseMemoryLimit("proxyLimits.memory", in); err != nil || got != want {
			t.Errorf("ParseMemoryLimit(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for in, why := range map[string]string{
		"256":                   "below 8 MiB",
		"4Mi":                   "below 8 MiB",
		"256 MB?":               "want bytes",
		"1T":                    "want bytes",
		"Mi":                    "want bytes",
		"-1":                    "want bytes",
		"1.5g":                  "want bytes",
		"99999999999999999999g": "want bytes",
		"17179869184g":          "too large",
	} {
		_, err := ParseMemoryLimit("proxyLimits.memory", in)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Key != "proxyLimits.memory" || fe.Value != in || !strings.Contains(err.Error(), why) {
			t.Errorf("ParseMemoryLimit(%q): %v, want a FieldError saying %q", in, err, why)
		}
	}
}

func TestParsePidsAndCPUWeight(t *testing.T) {
	if n, err := ParsePidsLimit("--proxy-pids", "512"); err != nil || n != 512 {
		t.Errorf("pids 512: %d, %v", n, err)
	}
	if n, err := ParsePidsLimit("--proxy-pids", "max"); err != nil || n != cgroup.Max {
		t.Errorf("pids max: %d, %v", n, err)
	}
	for _, bad := range []string{"8", "x", "-5"} {
		if _, err := ParsePidsLimit("--proxy-pids", bad); err == nil || !strings.Contains(err.Error(), `--proxy-pids "`+bad+`"`) {
			t.Errorf("pids %q: %v", bad, err)
		}
	}
	if n, err := ParseCPUWeight("--proxy-cpu-weight", "50"); err != nil || n != 50 {
		t.Errorf("weight 50: %d, %v", n, err)
	}
	for _, bad := range []string{"0", "10001", "max", "1.5"} {
		if _, err := ParseCPUWeight("--proxy-cpu-weight", bad); err == nil || !strings.Contains(err.Error(), "want 1 to 10000") {
			t.Errorf("weight %q: %v", bad, err)
		}
	}
}

func TestProxyLimitsConfig(t *testing.T) {
	var c ProxyLimitsConfig
	if err := json.Unmarshal([]byte(`{"memory": "64Mi", "pids": 100, "cpuWeight": "50"}`), &c); err != nil {
		t.Fatal(err)
	}
	l, err := c.Limits("proxyLimits")
	if err != nil || l != (cgroup.Limits{Memory: 64 << 20, Pids: 100, CPUWeight: 50}) {
		t.Errorf("limits %+v, %v", l, err)
	}
	if back := ProxyLimitsConfigOf(l); back == nil || back.Memory != "67108864" || back.Pids != "100" || back.CPUWeight != "50" {
		t.Errorf("ProxyLimitsConfigOf: %+v", back)
	}
	if ProxyLimitsConfigOf(cgroup.Limits{}) != nil {
		t.Error("no limits: want nil")
	}
	// As the front doors decode it.
	if err := strictjson.Decode("proxyLimits", []byte(`{"memroy": "64Mi"}`), &c); err == nil || !strings.Contains(err.Error(), `proxyLimits "memroy": unknown key`) {
		t.Errorf("a misspelt key: %v", err)
	}
	if err := strictjson.Decode("proxyLimits", []byte(`{"pids": true}`), &c); err == nil || err.Error() != `proxyLimits.pids true: want a number or a string` {
		t.Errorf("pids true: %v", err)
	}
	c = ProxyLimitsConfig{Pids: "3"}
	if _, err := c.Limits("proxyLimits"); err == nil || !strings.Contains(err.Error(), `proxyLimits.pids "3"`) {
		t.Errorf("pids 3: %v", err)
	}
	var none *ProxyLimitsConfig
	if l, err := none.Limits("proxyLimits"); err != nil || l != (cgroup.Limits{}) {
		t.Errorf("nil config: %+v, %v", l, err)
	}
}

// FuzzParseCgroupLimits: each limit parser either refuses a value with a
// FieldError that names the key and the value, or returns the default
// (0), no limit (cgroup.Max), or a limit within its bounds.
func FuzzParseCgroupLimits(f *testing.F) {
	for _, s := range []string{"", "max", "256Mi", "1g", "268435456", "64", "16", "10000", "0", "-1", "1.5g", "17179869184g", " 8m "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		check := func(what string, n uint64, err error, least, most uint64) {
			t.Helper()
			if err != nil {
				var fe *FieldError
				if !errors.As(err, &fe) || fe.Key != "k" || fe.Value != v {
					t.Fatalf("%s(%q): %v, want a FieldError naming k and the value", what, v, err)
				}
				return
			}
			if n != 0 && n != cgroup.Max && (n < least || n > most) {
				t.Fatalf("%s(%q) = %d, outside %d to %d", what, v, n, least, most)
			}
		}
		n, err := ParseMemoryLimit("k", v)
		check("ParseMemoryLimit", n, err, MinProxyMemory, cgroup.Max)
		n, err = ParsePidsLimit("k", v)
		check("ParsePidsLimit", n, err, MinProxyPids, cgroup.Max)
		n, err = ParseCPUWeight("k", v)
		if n == cgroup.Max {
			t.Fatalf("ParseCPUWeight(%q) = no limit", v)
		}
		check("ParseCPUWeight", n, err, 1, cgroup.MaxCPUWeight)
	})
}
