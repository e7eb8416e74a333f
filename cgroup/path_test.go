package cgroup

import (
	"strconv"
	"strings"
	"testing"
)

func TestParsePath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/kubepods/burstable/pod1", "/kubepods/burstable/pod1"},
		{"/docker/abc/", "/docker/abc"},
		{"/a/../b", "/b"},
		{"/", "/"},
		{"kubepods-burstable-pod1.slice", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice"},
		{"machine.slice", "/machine.slice"},
		{"-.slice", "/"},
		{"system.slice:docker:1234", "/system.slice/docker-1234.scope"},
		{"kubepods-besteffort-pod9.slice:cri-containerd:ab12", "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod9.slice/cri-containerd-ab12.scope"},
		{":runc:ctr1", "/system.slice/runc-ctr1.scope"},
		{"system.slice::ctr1", "/system.slice/ctr1.scope"},
		{"user.slice:x:user-1000-job.slice", "/user.slice/user-1000-job.slice"},
	} {
		got, err := ParsePath(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParsePath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "relative/path", "docker", "a--b.slice", "-a.slice", "a-.slice", ".slice", "system.slice:docker:", "x.slice:p:a/b", "nota:slice:x", "/a\nb", "/a\tb", "a/b.slice", "kube pods.slice", "kube\x7fpods.slice"} {
		got, err := ParsePath(in)
		if err == nil {
			t.Errorf("ParsePath(%q) = %q, want an error", in, got)
			continue
		}
		if !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("ParsePath(%q): %v does not name the value", in, err)
		}
	}
}

func TestParsePathErrorNamesValue(t *testing.T) {
	_, err := ParsePath("pod1")
	if err == nil || !strings.Contains(err.Error(), `"pod1"`) || !strings.Contains(err.Error(), "absolute path") {
		t.Errorf("ParsePath(pod1): %v", err)
	}
}
