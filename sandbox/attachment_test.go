package sandbox

import (
	"strings"
	"testing"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/spec"
)

// Enforce refuses a request without what it needs before anything is
// made.
func TestRequestDefaults(t *testing.T) {
	p, _ := conf.NewPolicy(conf.ModeAllowlist, nil)
	for _, tc := range []struct {
		r    Request
		want string
	}{
		{Request{Attachment: Attachment{Key: "k", NetNS: "/proc/self/ns/net"}}, "no policy"},
		{Request{Attachment: Attachment{Key: "k"}, Spec: spec.Spec{Policy: p}}, "no network namespace"},
		{Request{Attachment: Attachment{Key: "../k", NetNS: "/x"}, Spec: spec.Spec{Policy: p}}, `sandbox key "../k"`},
		{Request{Attachment: Attachment{Key: "k", NetNS: "/x"}, Spec: spec.Spec{Policy: &conf.Policy{Mode: "wide"}}}, `policy mode "wide"`},
	} {
		r := tc.r
		r.StateDir = t.TempDir()
		if err := r.defaults(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.r, err, tc.want)
		}
	}
}
