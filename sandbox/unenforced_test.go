package sandbox

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/enforce"
)

// A pod passed through is recorded with its identity and label and
// nothing else: its namespace gets no table, Check finds it as recorded,
// the policy edits refuse it, Holder does not count it, Find names it by
// its pod id, and Teardown (twice) removes the record and touches no rule
// in the namespace.
func TestRecordUnenforced(t *testing.T) {
	nsPath := newNetNS(t, "excluded")
	stateDir := t.TempDir()
	a := Attachment{Key: "3f2a-eth0", ID: "kube-system/coredns-0", Name: "coredns-0", PodUID: "0b1c", Runtime: "cni",
		Network: "k8s", IfName: "eth0", NetNS: nsPath, CgroupParent: "/kubepods/pod0b1c"}
	s, err := RecordUnenforced(stateDir, a, "excluded namespace")
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load(stateDir, a.Key)
	if err != nil {
		t.Fatal(err)
	}
	if got.Unenforced != "excluded namespace" || got.Label != "n/a (excluded namespace)" || got.ID != a.ID || got.PodUID != "0b1c" ||
		got.CgroupParent != a.CgroupParent || got.NetNSIno == 0 || got.NetNSIno != s.NetNSIno || got.PID != 0 {
		t.Errorf("recorded %+v", got)
	}
	if _, err := os.Stat(got.PolicyPath()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a policy file for an unenforced pod: %v", err)
	}
	if ok, err := enforce.Present(nsPath); err != nil || ok {
		t.Errorf("doorman's table in the namespace: %v, %v", ok, err)
	}
	if err := Check(stateDir, a.Key); err != nil {
		t.Errorf("Check: %v", err)
	}
	if _, err := UpdatePolicy(stateDir, a.Key, &conf.Policy{Mode: conf.ModeOpen}); err == nil || !strings.Contains(err.Error(), "does not enforce it (excluded namespace)") {
		t.Errorf("UpdatePolicy: %v", err)
	}
	if f, err := Find(stateDir, "kube-system/coredns-0"); err != nil || f.Key != a.Key {
		t.Errorf("Find by pod id: %v, %v", f, err)
	}

	// Someone else's table in the namespace (an OCI hook's sandbox):
	// the record holds nothing, and its teardown leaves the table.
	if err := enforce.Apply(nsPath, enforce.Spec{DenyAll: true}); err != nil {
		t.Fatal(err)
	}
	if h, stale := Holder(stateDir, "other", nsPath); h != nil || len(stale) != 1 {
		t.Errorf("Holder: %v, %v; want none holding, the record stale", h, stale)
	}
	for range 2 {
		if err := Teardown(stateDir, a.Key); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Load(stateDir, a.Key); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record after Teardown: %v", err)
	}
	if ok, _ := enforce.Present(nsPath); !ok {
		t.Error("Teardown of an unenforced record removed the namespace's table")
	}
}
