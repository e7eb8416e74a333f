package status

import (
	"testing"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/sandbox"
)

// Health judges each combination of facts as ls and show document it.
func TestHealth(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    Facts
		want string
	}{
		{"mode none, nothing runs", Facts{ModeNone: true}, HealthNone},
		{"mode none, a worker left running", Facts{ModeNone: true, Serving: true}, HealthUp},
		{"mode none, a supervisor left running", Facts{ModeNone: true, Supervised: true, SupervisorAlive: true}, HealthRestarting},
		{"stopped by an operator", Facts{Stopped: true, Supervised: true, SupervisorAlive: true}, HealthStopped},
		{"stopped wins over serving", Facts{Stopped: true, Serving: true, Unresponsive: true}, HealthStopped},
		{"serving, supervised", Facts{Serving: true, Supervised: true, SupervisorAlive: true}, HealthUp},
		{"serving, an earlier release's (no supervisor)", Facts{Serving: true}, HealthUp},
		{"serving, no heartbeat answered", Facts{Serving: true, Unresponsive: true, Supervised: true, SupervisorAlive: true}, HealthUnresponsive},
		{"serving while crash looping", Facts{Serving: true, Supervised: true, SupervisorAlive: true, CrashLooping: true}, HealthCrashLoop},
		{"serving, supervisor gone", Facts{Serving: true, Supervised: true}, HealthUnsupervised},
		{"serving, supervisor gone, it had said crash loop", Facts{Serving: true, Supervised: true, CrashLooping: true}, HealthUnsupervised},
		{"between workers", Facts{Supervised: true, SupervisorAlive: true}, HealthRestarting},
		{"between workers, crash looping", Facts{Supervised: true, SupervisorAlive: true, CrashLooping: true}, HealthCrashLoop},
		{"nothing runs", Facts{Supervised: true}, HealthDown},
		{"nothing runs, no supervisor", Facts{}, HealthDown},
	} {
		if got := tc.f.Health(); got != tc.want {
			t.Errorf("%s (%+v): health %q, want %q", tc.name, tc.f, got, tc.want)
		}
	}
}

// A sandbox doorman passes through has no policy, proxy or log to report.
func TestDescribeUnenforced(t *testing.T) {
	s := &sandbox.State{Key: "c-eth0", Dir: t.TempDir()}
	s.Unenforced = "namespace kube-system is excluded"
	s.Label = "pod"
	i := Describe(s)
	if i.Proxy.Health != HealthNA || i.Mode != "-" || i.Entries != -1 || i.PolicyFile != "" || i.LogFile != "" || i.Unenforced != s.Unenforced {
		t.Errorf("unenforced sandbox described as %+v", i)
	}
	if i.Policy() != nil || i.State() != s {
		t.Errorf("unenforced sandbox: policy %v, state %p (want nil, %p)", i.Policy(), i.State(), s)
	}
}

// A sandbox whose live policy file does not load is reported invalid, its
// proxy judged all the same.
func TestDescribeInvalidPolicy(t *testing.T) {
	s := &sandbox.State{Key: "c-eth0", Dir: t.TempDir()}
	s.Mode = conf.ModeNone
	i := Describe(s)
	if i.Mode != "invalid" || i.PolicyError == "" || i.Policy() != nil {
		t.Errorf("no policy file: mode %q, error %q, policy %v", i.Mode, i.PolicyError, i.Policy())
	}
	if i.Proxy.Health != HealthNone {
		t.Errorf("mode none, nothing running: health %q, want %q", i.Proxy.Health, HealthNone)
	}
}

func TestDisplayLabel(t *testing.T) {
	for _, tc := range []struct {
		label string
		mode  conf.Mode
		want  string
	}{
		{"full", conf.ModeOpen, "n/a"},
		{"n/a", conf.ModeAllowlist, "unknown (first enforced in mode open)"},
		{"full", conf.ModeAllowlist, "full"},
	} {
		if got := DisplayLabel(tc.label, tc.mode); got != tc.want {
			t.Errorf("DisplayLabel(%q, %s) = %q, want %q", tc.label, tc.mode, got, tc.want)
		}
	}
}
