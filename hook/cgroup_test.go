package hook

import (
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

func TestCgroupParent(t *testing.T) {
	for in, want := range map[string]string{
		"":                                "",
		"/docker/3f2a":                    "/docker",
		"/kubepods/burstable/pod1/ctr":    "/kubepods/burstable/pod1",
		"system.slice:docker:3f2a":        "/system.slice",
		"kubepods-pod1.slice:crio:ab12":   "/kubepods.slice/kubepods-pod1.slice",
		"relative/ctr":                    "",
		"machine.slice:libpod:not/a/name": "",
	} {
		oci := &specs.Spec{Linux: &specs.Linux{CgroupsPath: in}}
		if got := cgroupParent(oci); got != want {
			t.Errorf("cgroupParent(%q) = %q, want %q", in, got, want)
		}
	}
	if got := cgroupParent(&specs.Spec{}); got != "" {
		t.Errorf("no linux section: %q", got)
	}
}
