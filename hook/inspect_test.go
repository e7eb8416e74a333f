package hook

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/ca"
)

// A container whose inspect label names hosts gets a read-only bundle (its
// image's own system bundle, then the network's CA) over the standard
// bundle paths its image has, and the variables that name it; the CA key
// is mounted nowhere.
func TestPrepareBundleTrust(t *testing.T) {
	const self = "/usr/local/bin/doorman"
	dockerRoot := t.TempDir()
	writeDockerContainer(t, dockerRoot, "c1", "web", map[string]string{
		AnnotationAllowedHosts: "api.example.test",
		AnnotationInspect:      `{"api.example.test": {"deny": [{"method": "POST", "path": "/v1/messages", "json": {"tools[].type": "web_search*"}}]}}`,
	})
	caRoot := filepath.Join(t.TempDir(), "ca")
	cfg := RuntimeConfig{DockerRoot: dockerRoot, DefaultPolicy: filepath.Join(t.TempDir(), "none"), CADir: caRoot}
	config := `{"ociVersion": "1.0.2", "root": {"path": "rootfs"}, "process": {"args": ["sh"], "env": ["A=1"]},
  "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
  "linux": {"namespaces": [{"type": "network", "path": "/run/netns/x"}]}}`
	bundle := bundleWith(t, config, "c1")
	rootfs := filepath.Join(bundle, "rootfs")
	os.MkdirAll(filepath.Join(rootfs, "etc/pki/tls/certs"), 0o755)
	os.WriteFile(filepath.Join(rootfs, "etc/pki/tls/certs/ca-bundle.crt"), []byte("# the image's roots\n"), 0o644)

	if err := PrepareBundle(bundle, "c1", cfg, self); err != nil {
		t.Fatalf("PrepareBundle: %v", err)
	}
	got := readConfig(t, bundle)
	caDir := filepath.Join(caRoot, hookCAName)
	want := ca.BundlePath(caDir, Key("c1"))
	var dests []string
	for _, m := range got["mounts"].([]any) {
		m := m.(map[string]any)
		if m["source"] == want {
			dests = append(dests, m["destination"].(string))
			if opts := m["options"].([]any); !slices.Contains(opts, any("ro")) {
				t.Errorf("bundle mount %v is not read-only", m)
			}
		}
		if s, _ := m["source"].(string); strings.Contains(s, ca.KeyFile) {
			t.Errorf("the CA key is mounted: %v", m)
		}
	}
	if strings.Join(dests, " ") != "/etc/ssl/certs/ca-certificates.crt /etc/pki/tls/certs/ca-bundle.crt" {
		t.Errorf("bundle mounted at %v", dests)
	}
	env := got["process"].(map[string]any)["env"].([]any)
	for _, k := range ca.BundleEnv {
		if !slices.Contains(env, any(k+"=/etc/ssl/certs/ca-certificates.crt")) {
			t.Errorf("env lacks %s: %v", k, env)
		}
	}
	data, err := os.ReadFile(want)
	cert, _ := ca.CertPEM(caDir)
	if err != nil || !strings.HasPrefix(string(data), "# the image's roots\n") || !strings.HasSuffix(string(data), string(cert)) {
		t.Fatalf("bundle %s: %v\n%s", want, err, data)
	}
	if info, err := ca.Show(caDir); err != nil || strings.Join(info.Hosts, " ") != "api.example.test" {
		t.Fatalf("CA: %+v %v", info, err)
	}

	// Without rules nothing is mounted and no CA is made.
	cfg.CADir = filepath.Join(t.TempDir(), "ca2")
	writeDockerContainer(t, dockerRoot, "c2", "web2", map[string]string{AnnotationAllowedHosts: "api.example.test"})
	bundle2 := bundleWith(t, config, "c2")
	if err := PrepareBundle(bundle2, "c2", cfg, self); err != nil {
		t.Fatal(err)
	}
	if n := len(readConfig(t, bundle2)["mounts"].([]any)); n != 1 {
		t.Errorf("%d mounts without rules", n)
	}
	if _, err := os.Stat(cfg.CADir); !os.IsNotExist(err) {
		t.Errorf("a CA was made without rules")
	}

	// A label that does not parse refuses the container.
	writeDockerContainer(t, dockerRoot, "c3", "web3", map[string]string{AnnotationAllowedHosts: "a.example", AnnotationInspect: `{"a.example": {"deny": [{"methods": "POST"}]}}`})
	if err := PrepareBundle(bundleWith(t, config, "c3"), "c3", cfg, self); err == nil || !strings.Contains(err.Error(), AnnotationInspect) {
		t.Fatalf("bad inspect label: %v", err)
	}
}
