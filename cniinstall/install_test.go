package cniinstall

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// The primary CNIs' conflists, as their documentation and manifests write
// them, with the plugin types the runtime sees in each.
var primaries = []struct {
	file  string
	types []string
}{
	{"10-kindnet.conflist", []string{"ptp", "portmap"}},
	{"10-flannel.conflist", []string{"flannel", "portmap"}},
	{"10-calico.conflist", []string{"calico", "portmap", "bandwidth"}},
	{"05-cilium.conflist", []string{"aws-cni", "portmap", "cilium-cni"}},
	{"10-aws.conflist", []string{"aws-cni", "egress-cni", "portmap"}},
}

func TestInstallIntoPrimaryConflists(t *testing.T) {
	for _, p := range primaries {
		t.Run(p.file, func(t *testing.T) {
			orig := testdata(t, p.file)
			if got := pluginTypes(t, orig); !reflect.DeepEqual(got, p.types) {
				t.Fatalf("test data: types %v, want %v", got, p.types)
			}
			// Calico keeps its kubeconfig beside its conflist: a file the
			// runtimes do not read, and neither does the installer.
			n := newNode(t, map[string][]byte{p.file: orig, "calico-kubeconfig": []byte("apiVersion: v1\n")})
			changes, err := n.installer(nil).Install()
			if err != nil {
				t.Fatal(err)
			}
			if len(changes) != 2 {
				t.Errorf("changes %v, want the binary and the conflist", changes)
			}
			got := n.read(t, p.file)
			if types := pluginTypes(t, got); !reflect.DeepEqual(types, append(p.types, PluginType)) {
				t.Errorf("types %v, want %v and doorman last", types, p.types)
			}
			e := assertOneEntry(t, got)
			if e["mode"] != "allowlist" || !reflect.DeepEqual(e["excludeNamespaces"], []any{"kube-system"}) {
				t.Errorf("entry %v: want the default mode and excluded namespaces", e)
			}
			assertInsertedOnly(t, orig, got)
			bin, err := os.ReadFile(filepath.Join(n.binDir, "doorman"))
			if err != nil || !bytes.Equal(bin, []byte("#!/bin/false\n# not really doorman\n")) {
				t.Errorf("binary: %q, %v", bin, err)
			}
			if fi, _ := os.Stat(filepath.Join(n.binDir, "doorman")); fi == nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("binary mode: %v", fi)
			}

			// A second run, by a new installer as after a restart,
			// changes no byte and does not even replace the file.
			before, _ := os.Stat(n.path(p.file))
			changes, err = n.installer(nil).Install()
			if err != nil || len(changes) != 0 {
				t.Fatalf("second run: %v, %v", changes, err)
			}
			if again := n.read(t, p.file); !bytes.Equal(again, got) {
				t.Errorf("second run changed the file:\n%s", again)
			}
			if after, _ := os.Stat(n.path(p.file)); !os.SameFile(before, after) {
				t.Error("second run replaced the file")
			}
			if err := n.installer(nil).Check(); err != nil {
				t.Errorf("check: %v", err)
			}
			if err := n.installer(nil).CheckUninstalled(); err == nil {
				t.Error("CheckUninstalled passed with doorman installed")
			}

			if _, err := n.installer(nil).Uninstall(false); err != nil {
				t.Fatal(err)
			}
			if back := n.read(t, p.file); !bytes.Equal(back, orig) {
				t.Errorf("uninstall did not restore the file byte for byte:\n%s", back)
			}
			if _, err := os.Stat(filepath.Join(n.binDir, "doorman")); err != nil {
				t.Errorf("uninstall removed the binary: %v", err)
			}
			if err := n.installer(nil).CheckUninstalled(); err != nil {
				t.Errorf("CheckUninstalled: %v", err)
			}
			if err := n.installer(nil).Check(); err == nil {
				t.Error("check passed after uninstall")
			}
		})
	}
}

// TestInstallConvertsConf converts a single-plugin bridge .conf (and the
// same as .json) into a conflist that is still the primary, and restores it
// on uninstall.
func TestInstallConvertsConf(t *testing.T) {
	for _, name := range []string{"10-mynet.conf", "10-mynet.json"} {
		t.Run(name, func(t *testing.T) {
			orig := testdata(t, "10-mynet.conf")
			n := newNode(t, map[string][]byte{name: orig, "99-other.conflist": testdata(t, "10-flannel.conflist")})
			if err := os.Chmod(n.path(name), 0o600); err != nil {
				t.Fatal(err)
			}
			log := &logBuffer{}
			if _, err := n.installer(log).Install(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(n.path(name)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s is still there: %v", name, err)
			}
			primary, _, err := Primary(n.confDir)
			if err != nil || primary != n.path("10-mynet.conflist") {
				t.Fatalf("primary %s, %v: want the new conflist", primary, err)
			}
			got := n.read(t, "10-mynet.conflist")
			if types := pluginTypes(t, got); !reflect.DeepEqual(types, []string{"bridge", PluginType}) {
				t.Errorf("types %v", types)
			}
			assertOneEntry(t, got)
			// The conversion is the conflist libcni makes of the .conf.
			conf, err := libcni.ConfFromBytes(orig)
			if err != nil {
				t.Fatal(err)
			}
			want, err := libcni.ConfListFromConf(conf)
			if err != nil {
				t.Fatal(err)
			}
			l, _ := libcni.ConfListFromBytes(got)
			if l.Name != want.Name || l.CNIVersion != want.CNIVersion {
				t.Errorf("name %q version %q, want %q %q", l.Name, l.CNIVersion, want.Name, want.CNIVersion)
			}
			var a, b any
			json.Unmarshal(l.Plugins[0].Bytes, &a)
			json.Unmarshal(want.Plugins[0].Bytes, &b)
			if !reflect.DeepEqual(a, b) {
				t.Errorf("first plugin %s, want %s", l.Plugins[0].Bytes, want.Plugins[0].Bytes)
			}
			if fi, _ := os.Stat(n.path("10-mynet.conflist")); fi.Mode().Perm() != 0o600 {
				t.Errorf("conflist mode %v, want the .conf's 0600", fi.Mode())
			}
			if backup := n.read(t, name+".doorman-backup"); !bytes.Equal(backup, orig) {
				t.Errorf("backup differs from the original")
			}
			if log.find(t, "converted", n.path("10-mynet.conflist"), "single plugin") == nil {
				t.Errorf("no log line for the conversion: %v", log.lines(t))
			}

			snap := n.snapshot(t)
			if changes, err := n.installer(nil).Install(); err != nil || len(changes) != 0 {
				t.Fatalf("second run: %v, %v", changes, err)
			}
			n.assertUnchanged(t, snap)

			if _, err := n.installer(nil).Uninstall(false); err != nil {
				t.Fatal(err)
			}
			if back := n.read(t, name); !bytes.Equal(back, orig) {
				t.Errorf("uninstall did not restore %s:\n%s", name, back)
			}
			if fi, _ := os.Stat(n.path(name)); fi.Mode().Perm() != 0o600 {
				t.Errorf("restored mode %v, want 0600", fi.Mode())
			}
			for _, gone := range []string{"10-mynet.conflist", name + ".doorman-backup"} {
				if _, err := os.Stat(n.path(gone)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s left after uninstall", gone)
				}
			}
		})
	}
}

// TestUninstallKeepsEditedConversion: when the converted conflist's other
// plugins changed since, uninstall only removes the entry and keeps the
// backup, saying so.
func TestUninstallKeepsEditedConversion(t *testing.T) {
	n := newNode(t, map[string][]byte{"10-mynet.conf": testdata(t, "10-mynet.conf")})
	if _, err := n.installer(nil).Install(); err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(n.read(t, "10-mynet.conflist"), []byte(`"ipMasq": true`), []byte(`"ipMasq": false`), 1)
	n.write(t, "10-mynet.conflist", edited)
	log := &logBuffer{}
	if _, err := n.installer(log).Uninstall(false); err != nil {
		t.Fatal(err)
	}
	got := n.read(t, "10-mynet.conflist")
	if types := pluginTypes(t, got); !reflect.DeepEqual(types, []string{"bridge"}) {
		t.Errorf("types %v, want the bridge alone", types)
	}
	if !bytes.Contains(got, []byte(`"ipMasq": false`)) {
		t.Error("the edit was lost")
	}
	if _, err := os.Stat(n.path("10-mynet.conf")); !errors.Is(err, os.ErrNotExist) {
		t.Error("the stale original was restored over an edited conflist")
	}
	if _, err := os.Stat(n.path("10-mynet.conf.doorman-backup")); err != nil {
		t.Errorf("backup removed: %v", err)
	}
	if log.find(t, "wrote", n.path("10-mynet.conflist"), "stays a conflist") == nil {
		t.Errorf("no log line saying why: %v", log.lines(t))
	}
}

// TestConversionRefused: a conversion that would not leave the new
// conflist first, or would overwrite a file doorman did not write, changes
// nothing.
func TestConversionRefused(t *testing.T) {
	conf := testdata(t, "10-mynet.conf")
	for name, files := range map[string]map[string][]byte{
		"sorts between":   {"10-mynet.conf": conf, "10-mynet.conf.d.json": conf},
		"would overwrite": {"10-mynet.conf": conf, "10-mynet.conflist": testdata(t, "10-flannel.conflist")},
	} {
		t.Run(name, func(t *testing.T) {
			n := newNode(t, files)
			snap := n.snapshot(t)
			_, err := n.installer(nil).Install()
			if err == nil {
				t.Fatal("no error")
			}
			t.Log(err)
			n.assertUnchanged(t, snap)
		})
	}
}

// TestInvalidFirstFileSkipped: files that sort first but do not load are
// passed over as CRI-O passes over them (containerd fails on them, so no
// pod starts there), and left alone.
func TestInvalidFirstFileSkipped(t *testing.T) {
	invalid := map[string][]byte{
		"00-truncated.conflist": []byte(`{"cniVersion": "1.0.0", "name": "x", "plugins": [{"type": "bri`),
		"01-notype.conf":        []byte(`{"cniVersion": "1.0.0", "name": "x"}`),
		"02-noplugins.conflist": []byte(`{"cniVersion": "1.0.0", "name": "x", "plugins": []}`),
		"03-list-in-conf.json":  testdata(t, "10-flannel.conflist"),
		"04-empty.conf":         {},
	}
	// Each is what libcni, the runtimes' loader, refuses.
	dir := t.TempDir()
	for name, data := range invalid {
		p := filepath.Join(dir, name)
		os.WriteFile(p, data, 0o644)
		var err error
		if strings.HasSuffix(name, ".conflist") {
			_, err = libcni.ConfListFromFile(p)
		} else {
			_, err = libcni.ConfFromFile(p)
		}
		if err == nil {
			t.Fatalf("libcni loads %s", name)
		}
		if Loadable(p) == nil {
			t.Errorf("Loadable(%s) is nil", name)
		}
	}
	files := map[string][]byte{"10-flannel.conflist": testdata(t, "10-flannel.conflist")}
	for k, v := range invalid {
		files[k] = v
	}
	n := newNode(t, files)
	primary, skipped, err := Primary(n.confDir)
	if err != nil || primary != n.path("10-flannel.conflist") || len(skipped) != len(invalid) {
		t.Fatalf("primary %s, skipped %v, %v", primary, skipped, err)
	}
	if _, err := n.installer(nil).Install(); err != nil {
		t.Fatal(err)
	}
	assertOneEntry(t, n.read(t, "10-flannel.conflist"))
	for name, data := range invalid {
		if got := n.read(t, name); !bytes.Equal(got, data) {
			t.Errorf("%s was changed", name)
		}
	}
}

// TestOwnFilesIgnored: doorman's temporary and backup files are none that
// libcni lists, so they never become the primary.
func TestOwnFilesIgnored(t *testing.T) {
	n := newNode(t, map[string][]byte{
		"10-flannel.conflist": testdata(t, "10-flannel.conflist"),
		// As a crash would leave them, valid and sorting first.
		".00-a.conflist" + tmpInfix + "123": testdata(t, "10-calico.conflist"),
		"00-a.conf" + backupSuffix:          testdata(t, "10-mynet.conf"),
	})
	files, err := libcni.ConfFiles(n.confDir, ConfExtensions)
	if err != nil || len(files) != 1 {
		t.Fatalf("libcni lists %v, %v: want the flannel conflist alone", files, err)
	}
	primary, _, err := Primary(n.confDir)
	if err != nil || primary != n.path("10-flannel.conflist") {
		t.Fatalf("primary %s, %v", primary, err)
	}
}

// TestLeftoversRemoved: temporary files an interrupted write left are
// removed by the next pass, and the change is logged.
func TestLeftoversRemoved(t *testing.T) {
	n := newNode(t, map[string][]byte{
		"10-flannel.conflist":                      testdata(t, "10-flannel.conflist"),
		".10-flannel.conflist" + tmpInfix + "4242": []byte("{"),
	})
	binTmp := filepath.Join(n.binDir, ".doorman"+tmpInfix+"77")
	os.WriteFile(binTmp, []byte("half a binary"), 0o755)
	log := &logBuffer{}
	if _, err := n.installer(log).Install(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{n.path(".10-flannel.conflist" + tmpInfix + "4242"), binTmp} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left", p)
		}
		if log.find(t, "removed", p, "interrupted") == nil {
			t.Errorf("no line for %s: %v", p, log.lines(t))
		}
	}
}

// TestExistingEntryReplaced: an entry already there, with other settings
// and not last, is replaced where it stands; several collapse to one.
func TestExistingEntryReplaced(t *testing.T) {
	list := `{
  "cniVersion": "1.0.0",
  "name": "k",
  "plugins": [
    {"type": "ptp", "x-unknown": {"b": 1, "a": 2}},
    {
      "type": "doorman",
      "mode": "open",
      "allowedHosts": ["example.com"]
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "doorman", "mode": "none"}
  ]
}
`
	n := newNode(t, map[string][]byte{"10-k.conflist": []byte(list)})
	log := &logBuffer{}
	if _, err := n.installer(log).Install(); err != nil {
		t.Fatal(err)
	}
	got := n.read(t, "10-k.conflist")
	if types := pluginTypes(t, got); !reflect.DeepEqual(types, []string{"ptp", PluginType, "portmap"}) {
		t.Errorf("types %v", types)
	}
	e := assertOneEntry(t, got)
	if e["mode"] != "allowlist" || e["allowedHosts"] == nil {
		t.Errorf("entry %v: want the installer's settings", e)
	}
	if !bytes.Contains(got, []byte(`{"type": "ptp", "x-unknown": {"b": 1, "a": 2}},`)) {
		t.Errorf("the other plugins changed:\n%s", got)
	}
	if log.find(t, "wrote", n.path("10-k.conflist"), "2 doorman entries") == nil {
		t.Errorf("log: %v", log.lines(t))
	}
	if changes, err := n.installer(nil).Install(); err != nil || len(changes) != 0 {
		t.Errorf("second run: %v, %v", changes, err)
	}
}

// TestConfigInEntry: the --config settings are what the entry carries.
func TestConfigInEntry(t *testing.T) {
	cfg, err := ValidateConfig([]byte(`{
		"mode": "open", "allowedHosts": ["api.example.com"], "excludeNamespaces": [],
		"clusterDomain": "k8s.example", "serviceCIDRs": ["10.96.0.0/12"], "podCIDRs": ["10.244.0.0/16", "fd00:10:244::/56"],
		"allowDirect": ["203.0.113.5:5432"], "stateDir": "/run/d", "logDir": "/var/log/d",
		"otlpEndpoint": "http://127.0.0.1:4318", "otlpHeaders": {"authorization": "Bearer x"},
		"dnsFilter": false, "hostLayer": true, "allowICMP": true}`))
	if err != nil {
		t.Fatal(err)
	}
	n := newNode(t, map[string][]byte{"10-flannel.conflist": testdata(t, "10-flannel.conflist")})
	in := n.installer(nil)
	in.Config = cfg
	if _, err := in.Install(); err != nil {
		t.Fatal(err)
	}
	e := assertOneEntry(t, n.read(t, "10-flannel.conflist"))
	want := map[string]any{
		"type": "doorman", "mode": "open", "allowedHosts": []any{"api.example.com"}, "excludeNamespaces": []any{},
		"clusterDomain": "k8s.example", "serviceCIDRs": []any{"10.96.0.0/12"}, "podCIDRs": []any{"10.244.0.0/16", "fd00:10:244::/56"},
		"allowDirect": []any{"203.0.113.5:5432"}, "stateDir": "/run/d", "logDir": "/var/log/d",
		"otlpEndpoint": "http://127.0.0.1:4318", "otlpHeaders": map[string]any{"authorization": "Bearer x"},
		"dnsFilter": false, "hostLayer": true, "allowICMP": true,
		"capabilities": map[string]any{CapPodAnnotations: true, CapDNS: true, CapCgroupPath: true},
	}
	if !reflect.DeepEqual(e, want) {
		t.Errorf("entry\n%v\nwant\n%v", e, want)
	}
	// A changed config replaces the entry; back to the defaults.
	if _, err := n.installer(nil).Install(); err != nil {
		t.Fatal(err)
	}
	if e := assertOneEntry(t, n.read(t, "10-flannel.conflist")); e["mode"] != "allowlist" || e["dnsFilter"] != nil {
		t.Errorf("entry %v: want the defaults again", e)
	}
}

func TestMissingDirAndNoPrimary(t *testing.T) {
	n := newNode(t, nil)
	in := n.installer(nil)
	in.ConfDir = filepath.Join(n.confDir, "missing")
	if _, err := in.Install(); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing dir: %v", err)
	}
	n.write(t, "00-broken.conflist", []byte("{"))
	if _, err := n.installer(nil).Install(); !errors.Is(err, ErrNoPrimary) {
		t.Errorf("no valid file: %v", err)
	}
	if err := n.installer(nil).Check(); !errors.Is(err, ErrNoPrimary) {
		t.Errorf("check: %v", err)
	}
}

func TestSymlinkRefused(t *testing.T) {
	n := newNode(t, nil)
	target := filepath.Join(filepath.Dir(n.confDir), "real.conflist")
	os.WriteFile(target, testdata(t, "10-flannel.conflist"), 0o644)
	if err := os.Symlink(target, n.path("10-flannel.conflist")); err != nil {
		t.Fatal(err)
	}
	_, err := n.installer(nil).Install()
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("err %v", err)
	}
	if got, _ := os.ReadFile(target); !bytes.Equal(got, testdata(t, "10-flannel.conflist")) {
		t.Error("the link's target changed")
	}
}

// TestDirPluginsRefused: a network that also loads plugins from a
// directory (CNI 1.1) would run them after doorman's entry.
func TestDirPluginsRefused(t *testing.T) {
	n := newNode(t, map[string][]byte{"10-flannel.conflist": testdata(t, "10-flannel.conflist")})
	os.Mkdir(n.path("cbr0"), 0o755)
	os.WriteFile(filepath.Join(n.path("cbr0"), "bandwidth.conf"), []byte(`{"type": "bandwidth"}`), 0o644)
	if _, err := n.installer(nil).Install(); err == nil || !strings.Contains(err.Error(), "loads plugins from") {
		t.Fatalf("err %v", err)
	}
}

// TestWriteCheckedRefusesChangedTarget: the last read before the rename
// keeps doorman from putting back an older version of another writer's
// file.
func TestWriteCheckedRefusesChangedTarget(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "10-x.conflist")
	os.WriteFile(p, []byte("new content"), 0o644)
	theirs, _ := os.Stat(p)
	if err := writeChecked(p, []byte("stale edit"), []byte("old content"), p); !errors.Is(err, errChanged) {
		t.Fatalf("err %v", err)
	}
	// The other writer's file is back in place: its very inode, not a
	// copy.
	if got, _ := os.ReadFile(p); string(got) != "new content" {
		t.Errorf("file %q", got)
	}
	if now, _ := os.Stat(p); !os.SameFile(now, theirs) {
		t.Error("the other writer's file was replaced")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary file left: %v", ents)
	}
	// A file that was to be new but appeared meanwhile is not replaced.
	if err := writeChecked(p, []byte("stale edit"), nil, p); !errors.Is(err, errChanged) {
		t.Fatalf("new file: err %v", err)
	}
	if now, _ := os.Stat(p); !os.SameFile(now, theirs) {
		t.Error("the other writer's file was replaced")
	}
	if err := removeChecked(p, []byte("old content")); !errors.Is(err, errChanged) {
		t.Fatalf("remove: %v", err)
	}
	if now, _ := os.Stat(p); now == nil || !os.SameFile(now, theirs) {
		t.Error("a changed file was removed")
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temporary file left: %v", ents)
	}
	// And the expected content is replaced and removed.
	if err := writeChecked(p, []byte("edit"), []byte("new content"), p); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(p); string(got) != "edit" {
		t.Errorf("file %q", got)
	}
	if err := removeChecked(p, []byte("edit")); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("left %v", ents)
	}
}

func TestUninstallRemoveBinary(t *testing.T) {
	n := newNode(t, map[string][]byte{"10-flannel.conflist": testdata(t, "10-flannel.conflist")})
	if _, err := n.installer(nil).Install(); err != nil {
		t.Fatal(err)
	}
	if _, err := n.installer(nil).Uninstall(true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(n.binDir, "doorman")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("binary still there: %v", err)
	}
}

// TestBinaryReplaced: a different binary in the bin dir is replaced by a
// rename, so a process running the old one keeps its file.
func TestBinaryReplaced(t *testing.T) {
	n := newNode(t, map[string][]byte{"10-flannel.conflist": testdata(t, "10-flannel.conflist")})
	dst := filepath.Join(n.binDir, "doorman")
	os.WriteFile(dst, []byte("an older doorman\n"), 0o755)
	old, err := os.Open(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	if _, err := n.installer(nil).Install(); err != nil {
		t.Fatal(err)
	}
	if same, _ := sameContent(n.binary, dst); !same {
		t.Error("binary not replaced")
	}
	// The same bytes without the execute bits are no binary a runtime
	// can run.
	os.Chmod(dst, 0o644)
	if changes, err := n.installer(nil).Install(); err != nil || len(changes) != 1 || !strings.Contains(changes[0].Reason, "not executable") {
		t.Errorf("changes %v, %v", changes, err)
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o755 {
		t.Errorf("mode %v", fi.Mode())
	}
	var st syscall.Stat_t
	syscall.Fstat(int(old.Fd()), &st)
	if st.Nlink != 0 {
		t.Errorf("the old binary was written over in place (links %d), not replaced", st.Nlink)
	}
}
