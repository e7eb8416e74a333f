package plugin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/doorman-net/doorman/cgroup"
)

// RuntimeConfig is what a runtime passes doorman in runtimeConfig: the
// values of the capabilities doorman's entry declares (the installer
// declares all three), as the CNI conventions name them and as
// containerd's and CRI-O's CRI fill them in for a pod.
type RuntimeConfig struct {
	// DNS is the dns capability, nil if none was passed: for a pod, its
	// dns_config, which the kubelet also writes into its resolv.conf.
	DNS *DNSCapability
	// PodAnnotations is the io.kubernetes.cri.pod-annotations
	// capability: the pod's annotations (nil if none were passed), where
	// its doorman.io/* policy is (see package annotation).
	PodAnnotations map[string]string
	// CgroupPath is the cgroupPath capability: the cgroup the runtime
	// names for the sandbox (a pod's cgroup parent), "" if none. It is
	// either a cgroupfs path, absolute and clean
	// ("/kubepods/burstable/pod<uid>"), or, under the systemd cgroup
	// driver, a slice's unit name ("kubepods-burstable-pod<uid>.slice",
	// which systemd nests by its dashes); see parseCgroupPath.
	CgroupPath string
}

// DNSCapability is the dns capability's value. containerd writes its keys
// capitalised ({"Servers": [...], "Searches": [...], "Options": [...]}:
// go-cni's struct has no JSON tags), the CNI conventions in lower case;
// either is read.
type DNSCapability struct {
	Servers, Searches, Options []string
}

// The capabilities' keys in runtimeConfig.
const (
	capDNS            = "dns"
	capPodAnnotations = "io.kubernetes.cri.pod-annotations"
	capCgroupPath     = "cgroupPath"
)

// ParseRuntimeConfig parses a runtimeConfig object (absent or null: none
// passed). Each capability may be absent or null; one of the wrong shape
// is an error naming it and its value. Capabilities doorman does not use
// are ignored.
func ParseRuntimeConfig(data json.RawMessage) (RuntimeConfig, error) {
	var rc RuntimeConfig
	if isNull(data) {
		return rc, nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil {
		return rc, fmt.Errorf("runtimeConfig %s: want an object", compact(data))
	}
	var errs []error
	if r := raw[capDNS]; !isNull(r) {
		dns, err := parseDNSCapability(r)
		if err != nil {
			errs = append(errs, err)
		}
		rc.DNS = dns
	}
	if r := raw[capPodAnnotations]; !isNull(r) {
		if err := json.Unmarshal(r, &rc.PodAnnotations); err != nil || hasNull(r) {
			rc.PodAnnotations = nil
			errs = append(errs, fmt.Errorf("runtimeConfig %s %s: want an object of strings", capPodAnnotations, compact(r)))
		}
	}
	if r := raw[capCgroupPath]; !isNull(r) {
		if err := json.Unmarshal(r, &rc.CgroupPath); err != nil {
			errs = append(errs, fmt.Errorf("runtimeConfig %s %s: want a string", capCgroupPath, compact(r)))
		} else if err := checkCgroupPath(rc.CgroupPath); err != nil {
			rc.CgroupPath = ""
			errs = append(errs, fmt.Errorf("runtimeConfig %s %s: %w", capCgroupPath, compact(r), err))
		}
	}
	return rc, errors.Join(errs...)
}

// checkCgroupPath checks that p names a cgroup in a form the cgroup
// package places proxies below (cgroup.ParsePath: a cgroupfs path or a
// systemd slice), and, for a path, that it is clean: one that climbs
// ("..") or repeats slashes is an error rather than a cgroup somewhere
// else.
func checkCgroupPath(p string) error {
	if p == "" {
		return nil // none named, as if absent
	}
	if strings.HasPrefix(p, "/") && path.Clean(p) != p {
		return errors.New("want a clean absolute cgroup path (no ., .., // or trailing /)")
	}
	_, err := cgroup.ParsePath(p)
	return err
}

// parseDNSCapability parses the dns capability's object: its keys in
// either case, each absent, null or an array of strings.
func parseDNSCapability(r json.RawMessage) (*DNSCapability, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(r, &raw); err != nil {
		return nil, fmt.Errorf("runtimeConfig %s %s: want an object", capDNS, compact(r))
	}
	dns := &DNSCapability{}
	var errs []error
	for k, v := range raw {
		var dst *[]string
		switch k {
		case "Servers", "servers":
			dst = &dns.Servers
		case "Searches", "searches":
			dst = &dns.Searches
		case "Options", "options":
			dst = &dns.Options
		default:
			continue // "domain", and whatever a runtime adds
		}
		if isNull(v) {
			continue
		}
		if err := json.Unmarshal(v, dst); err != nil || hasNull(v) {
			errs = append(errs, fmt.Errorf("runtimeConfig %s.%s %s: want an array of strings", capDNS, k, compact(v)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return dns, nil
}

// isNull reports whether r is absent or JSON null.
func isNull(r json.RawMessage) bool {
	t := bytes.TrimSpace(r)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// hasNull reports whether the array or object r holds a null, which
// encoding/json would read as "".
func hasNull(r json.RawMessage) bool {
	return strictUnmarshal(r, new(any)) != nil
}

// cniArgs parses CNI_ARGS ("K=V;K=V", in any order; an element without
// "=" is skipped, and of a key given twice the last counts).
func cniArgs(s string) map[string]string {
	out := map[string]string{}
	for _, kv := range strings.Split(s, ";") {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			out[k] = v
		}
	}
	return out
}

// Pod is a Kubernetes pod as its runtime names it in CNI_ARGS.
type Pod struct {
	Namespace string // K8S_POD_NAMESPACE
	Name      string // K8S_POD_NAME
	UID       string // K8S_POD_UID, if given
}

// ID is the pod's sandbox id: "<namespace>/<name>", as `kubectl get pods
// -n <namespace>` names it.
func (p Pod) ID() string { return p.Namespace + "/" + p.Name }

// podOf returns the pod args names: a CRI runtime (containerd, CRI-O)
// passes K8S_POD_NAMESPACE and K8S_POD_NAME (and K8S_POD_UID). Podman
// passes K8S_POD_NAME alone, set to the container's name, which names no
// pod.
func podOf(args map[string]string) (Pod, bool) {
	p := Pod{Namespace: args["K8S_POD_NAMESPACE"], Name: args["K8S_POD_NAME"], UID: args["K8S_POD_UID"]}
	return p, p.Namespace != "" && p.Name != ""
}

// containerName is the name the runtime passed, if any: the pod's name,
// or Podman's container name.
func containerName(args map[string]string) string {
	return args["K8S_POD_NAME"]
}
