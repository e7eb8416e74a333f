package plugin

import (
	"encoding/json"
	"maps"
	"reflect"
	"strings"
	"testing"
)

// ParseRuntimeConfig reads what containerd sends (capitalised dns keys),
// what the CNI conventions say (lower case), and nulls or absence of
// anything.
func TestParseRuntimeConfig(t *testing.T) {
	for _, tc := range []struct {
		name, json string
		want       RuntimeConfig
	}{
		{"absent", ``, RuntimeConfig{}},
		{"null", `null`, RuntimeConfig{}},
		{"empty", `{}`, RuntimeConfig{}},
		{"all null", `{"dns": null, "io.kubernetes.cri.pod-annotations": null, "cgroupPath": null}`, RuntimeConfig{}},
		{"containerd's", `{"dns": {"Servers": ["10.96.0.10"], "Searches": ["team-a.svc.cluster.local", "svc.cluster.local"], "Options": ["ndots:5"]},
			"io.kubernetes.cri.pod-annotations": {"doorman.io/mode": "none", "example.com/team": "ci"},
			"cgroupPath": "/kubepods/besteffort/pod1234"}`,
			RuntimeConfig{
				DNS:            &DNSCapability{Servers: []string{"10.96.0.10"}, Searches: []string{"team-a.svc.cluster.local", "svc.cluster.local"}, Options: []string{"ndots:5"}},
				PodAnnotations: map[string]string{"doorman.io/mode": "none", "example.com/team": "ci"},
				CgroupPath:     "/kubepods/besteffort/pod1234",
			}},
		{"the conventions' lower case", `{"dns": {"servers": ["2001:db8::53"], "searches": ["example.test"], "options": null, "domain": "example.test"}}`,
			RuntimeConfig{DNS: &DNSCapability{Servers: []string{"2001:db8::53"}, Searches: []string{"example.test"}}}},
		{"dns without servers", `{"dns": {"Servers": null}}`, RuntimeConfig{DNS: &DNSCapability{}}},
		{"the systemd cgroup driver's slice", `{"cgroupPath": "kubepods-besteffort-pod0b1c_2d3e.slice"}`, RuntimeConfig{CgroupPath: "kubepods-besteffort-pod0b1c_2d3e.slice"}},
		{"cgroupfs root", `{"cgroupPath": "/"}`, RuntimeConfig{CgroupPath: "/"}},
		{"empty cgroupPath", `{"cgroupPath": ""}`, RuntimeConfig{}},
		{"capabilities doorman does not use", `{"portMappings": [{"hostPort": 80}], "bandwidth": {}}`, RuntimeConfig{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRuntimeConfig(json.RawMessage(tc.json))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v (dns %+v), want %+v (dns %+v)", got, got.DNS, tc.want, tc.want.DNS)
			}
		})
	}
}

// A capability of the wrong shape is an error naming it and its value.
func TestParseRuntimeConfigErrors(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`[]`, `runtimeConfig []: want an object`},
		{`{"dns": ["10.96.0.10"]}`, `runtimeConfig dns ["10.96.0.10"]: want an object`},
		{`{"dns": {"Servers": "10.96.0.10"}}`, `runtimeConfig dns.Servers "10.96.0.10": want an array of strings`},
		{`{"dns": {"servers": [null]}}`, `runtimeConfig dns.servers [null]: want an array of strings`},
		{`{"io.kubernetes.cri.pod-annotations": {"doorman.io/mode": 1}}`, `runtimeConfig io.kubernetes.cri.pod-annotations {"doorman.io/mode":1}: want an object of strings`},
		{`{"io.kubernetes.cri.pod-annotations": {"doorman.io/mode": null}}`, `want an object of strings`},
		{`{"cgroupPath": 7}`, `runtimeConfig cgroupPath 7: want a string`},
		{`{"cgroupPath": "kubepods/besteffort/pod1234"}`, `runtimeConfig cgroupPath "kubepods/besteffort/pod1234": cgroup "kubepods/besteffort/pod1234": want an absolute path`},
		{`{"cgroupPath": "/kubepods/../../system.slice"}`, `runtimeConfig cgroupPath "/kubepods/../../system.slice": want a clean absolute cgroup path`},
		{`{"cgroupPath": "/kubepods/pod1234/"}`, `want a clean absolute cgroup path`},
		{`{"cgroupPath": "/kubepods/pod\n1234"}`, `runtimeConfig cgroupPath "/kubepods/pod\n1234": cgroup "/kubepods/pod\n1234": holds a control character`},
		{`{"cgroupPath": "../kubepods.slice"}`, `want an absolute path`},
		{`{"cgroupPath": "kube pods.slice"}`, `is not a systemd slice name`},
	} {
		got, err := ParseRuntimeConfig(json.RawMessage(tc.json))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %+v, %v; want an error containing %q", tc.json, got, err, tc.want)
		}
	}
}

// CNI_ARGS come in any order; a pod is named by both its namespace and
// its name, which Podman (K8S_POD_NAME alone) does not give.
func TestPodOf(t *testing.T) {
	for _, tc := range []struct {
		args  string
		want  Pod
		isPod bool
	}{
		{"IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=3f2a;K8S_POD_UID=0b1c-2d", Pod{"team-a", "web-0", "0b1c-2d"}, true},
		{"K8S_POD_UID=0b1c-2d;K8S_POD_NAME=web-0;IgnoreUnknown=1;K8S_POD_NAMESPACE=team-a", Pod{"team-a", "web-0", "0b1c-2d"}, true},
		{"K8S_POD_NAMESPACE=team-a;K8S_POD_NAME=web-0", Pod{"team-a", "web-0", ""}, true}, // no uid
		{"IgnoreUnknown=1;K8S_POD_NAME=web", Pod{Name: "web"}, false},                     // Podman's
		{"K8S_POD_NAMESPACE=team-a", Pod{Namespace: "team-a"}, false},
		{"", Pod{}, false},
		{";;garbage;K8S_POD_NAMESPACE=a;=x;K8S_POD_NAME=b=c", Pod{"a", "b=c", ""}, true},
		{"K8S_POD_NAMESPACE=a;K8S_POD_NAME=b;K8S_POD_NAME=c", Pod{"a", "c", ""}, true}, // the last counts
	} {
		got, ok := podOf(cniArgs(tc.args))
		if got != tc.want || ok != tc.isPod {
			t.Errorf("podOf(%q) = %+v, %v; want %+v, %v", tc.args, got, ok, tc.want, tc.isPod)
		}
	}
	if id := (Pod{"team-a", "web-0", ""}).ID(); id != "team-a/web-0" {
		t.Errorf("ID %q", id)
	}
	if got := cniArgs("A=1;B;C="); !maps.Equal(got, map[string]string{"A": "1", "C": ""}) {
		t.Errorf("cniArgs: %v", got)
	}
}

// The seed corpora live in testdata/fuzz/<FuzzName>/.

// FuzzParseRuntimeConfig checks that ParseRuntimeConfig never panics, and
// that what it accepts holds no capability half-read.
func FuzzParseRuntimeConfig(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		rc, err := ParseRuntimeConfig(data)
		if err != nil {
			return
		}
		back, err := json.Marshal(map[string]any{"dns": rc.DNS, "io.kubernetes.cri.pod-annotations": rc.PodAnnotations, "cgroupPath": rc.CgroupPath})
		if err != nil {
			t.Fatal(err)
		}
		again, err := ParseRuntimeConfig(back)
		if err != nil || !reflect.DeepEqual(again, rc) {
			t.Fatalf("%s reads back as %+v, %v; want %+v", back, again, err, rc)
		}
	})
}
