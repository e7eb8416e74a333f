package cniinstall

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The manifests in deploy/kubernetes run this package; these tests keep
// them in step with it.

const deployDir = "../deploy/kubernetes"

func readDeploy(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// block returns the lines of the YAML block scalar under the line ending
// in key+": |", dedented.
func block(t *testing.T, doc, key string) string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != key+": |" {
			continue
		}
		indent := len(l) - len(strings.TrimLeft(l, " ")) + 2
		var out []string
		for _, b := range lines[i+1:] {
			if strings.TrimSpace(b) != "" && len(b)-len(strings.TrimLeft(b, " ")) < indent {
				break
			}
			out = append(out, strings.TrimPrefix(b, strings.Repeat(" ", indent)))
		}
		return strings.Join(out, "\n")
	}
	t.Fatalf("no block %q", key)
	return ""
}

// flagsAfter returns the "- --flag..." items of the YAML list that follows
// the first line equal to marker (trimmed), up to the first line that is
// not such an item.
func flagsAfter(t *testing.T, doc, marker string) []string {
	t.Helper()
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != marker {
			continue
		}
		var out []string
		for _, b := range lines[i+1:] {
			b = strings.TrimSpace(b)
			if !strings.HasPrefix(b, "- ") {
				break
			}
			out = append(out, strings.TrimPrefix(b, "- "))
		}
		return out
	}
	t.Fatalf("no %q", marker)
	return nil
}

func TestDeployConfigMapIsValid(t *testing.T) {
	cm := readDeploy(t, "configmap.yaml")
	cfg, err := ValidateConfig([]byte(block(t, cm, "install-cni.json")))
	if err != nil {
		t.Fatalf("the ConfigMap's install-cni.json is refused: %v", err)
	}
	if cfg.Mode != DefaultMode || len(cfg.AllowedHosts) != 0 || !reflect.DeepEqual(cfg.ExcludeNamespaces, DefaultExcludeNamespaces()) {
		t.Errorf("the ConfigMap's defaults differ from the built-in ones: %+v", cfg)
	}
}

func TestDeployDaemonSets(t *testing.T) {
	ds := readDeploy(t, "daemonset.yaml")
	args := flagsAfter(t, ds, "args:")
	want := []string{"--cni-bin-dir=/host/opt/cni/bin", "--cni-conf-dir=/host/etc/cni/net.d", "--config=/etc/doorman/install-cni.json"}
	if !reflect.DeepEqual(args, want) {
		t.Errorf("args %v, want %v", args, want)
	}
	// The readiness probe checks what the container installs.
	probe := flagsAfter(t, ds, "command:")
	if !reflect.DeepEqual(probe, append([]string{"/doorman", "install-cni", "--check"}, want...)) {
		t.Errorf("probe %v does not check what args install", probe)
	}
	for _, s := range []string{
		"hostNetwork: true", "priorityClassName: system-node-critical", "- operator: Exists",
		"privileged: true", "mountPath: /etc/doorman", "name: doorman-config",
		"mountPath: /host/opt/cni/bin", "mountPath: /host/etc/cni/net.d",
		"path: /opt/cni/bin", "path: /etc/cni/net.d", "path: /run/doorman", "path: /var/log/doorman",
		"namespace: doorman-system",
	} {
		if !strings.Contains(ds, s) {
			t.Errorf("daemonset.yaml lacks %q", s)
		}
	}
	if !strings.Contains(readDeploy(t, "namespace.yaml"), "name: doorman-system") {
		t.Error("namespace.yaml does not make doorman-system")
	}

	un := readDeploy(t, "uninstall/daemonset.yaml")
	uargs := flagsAfter(t, un, "args:")
	if !reflect.DeepEqual(uargs, []string{"--uninstall", want[0], want[1]}) {
		t.Errorf("uninstall args %v", uargs)
	}
	if uprobe := flagsAfter(t, un, "command:"); !reflect.DeepEqual(uprobe, []string{"/doorman", "install-cni", "--check", "--uninstall", want[0], want[1]}) {
		t.Errorf("uninstall probe %v", uprobe)
	}
}
