package annotation

import (
	"errors"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/spec"
)

func TestPolicy(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        string // the policy's String, "" for none asked
	}{
		{"none asked", map[string]string{"example.com/team": "ci"}, ""},
		{"nil", nil, ""},
		{"mode alone", map[string]string{Mode: "none"}, "none"},
		{"hosts alone", map[string]string{AllowedHosts: " api.example.com, ,*.github.com:443 "}, "allowlist api.example.com *.github.com:443"},
		{"both", map[string]string{Mode: "Open", AllowedHosts: ""}, "open"},
		{"empty hosts", map[string]string{AllowedHosts: ""}, "allowlist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ok, err := Policy(tc.annotations)
			if err != nil {
				t.Fatal(err)
			}
			if ok != (tc.want != "") {
				t.Fatalf("asked for a policy: %v, want %v", ok, tc.want != "")
			}
			if !ok {
				if p != nil {
					t.Errorf("a policy %v without annotations", p)
				}
				return
			}
			if got := string(p.Mode) + strings.Join(append([]string{""}, p.Hosts()...), " "); got != tc.want {
				t.Errorf("policy %q, want %q", got, tc.want)
			}
		})
	}
}

// A value that does not parse names the annotation and the value.
func TestPolicyErrors(t *testing.T) {
	for _, tc := range []struct {
		annotations map[string]string
		want        string
	}{
		{map[string]string{Mode: "permissive"}, `annotation doorman.io/mode: invalid mode "permissive"`},
		{map[string]string{Mode: ""}, `annotation doorman.io/mode: invalid mode ""`},
		{map[string]string{AllowedHosts: "api.example.com,a*b.example.com"}, `annotation doorman.io/allowed-hosts: "a*b.example.com": wildcard`},
		{map[string]string{Mode: "allowlist", AllowedHosts: "*"}, `annotation doorman.io/allowed-hosts: "*"`},
	} {
		p, ok, err := Policy(tc.annotations)
		if err == nil || !ok || p != nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, %v, %v; want an error containing %q", tc.annotations, p, ok, err, tc.want)
		}
	}
}

func TestDirect(t *testing.T) {
	d, err := Direct(map[string]string{AllowDirect: "203.0.113.7:5432, 2001:db8::/64,"})
	if err != nil || len(d) != 2 || d[0].String() != "203.0.113.7:5432" || d[1].String() != "2001:db8::/64" {
		t.Errorf("Direct: %v, %v", d, err)
	}
	if d, err := Direct(nil); d != nil || err != nil {
		t.Errorf("no annotation: %v, %v", d, err)
	}
	_, err = Direct(map[string]string{AllowDirect: "db.example.com"})
	var fe *spec.FieldError
	if !errors.As(err, &fe) || fe.Key != "annotation "+AllowDirect || fe.Value != "db.example.com" {
		t.Errorf("a name in allow-direct: %v, want a FieldError naming the annotation and the value", err)
	}
}

// The seed corpora live in testdata/fuzz/<FuzzName>/.

// FuzzPolicy checks that Policy never panics, asks for a policy exactly
// when either annotation is present, and that an accepted policy is one
// conf reads back from its own file form.
func FuzzPolicy(f *testing.F) {
	f.Fuzz(func(t *testing.T, mode, hosts string, withMode bool) {
		a := map[string]string{AllowedHosts: hosts}
		if withMode {
			a[Mode] = mode
		}
		p, ok, err := Policy(a)
		if !ok {
			t.Fatal("allowed-hosts present, but no policy asked for")
		}
		if err != nil {
			if p != nil {
				t.Fatal("a policy with an error")
			}
			return
		}
		back, err := conf.ParseFile(p.MarshalFile())
		if err != nil || !back.Equal(p) {
			t.Fatalf("%v does not read back: %v, %v", p, back, err)
		}
	})
}
