package runner

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestSearchPath(t *testing.T) {
	got := SearchPath("/usr/local/bin/doorman")
	want := []string{"/usr/local/bin", "/usr/local/lib/doorman/cni", "/opt/cni/bin", "/usr/lib/cni"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("SearchPath: got %v, want %v", got, want)
	}
}

func TestFindPlugins(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	touch := func(dir, name string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	touch(a, "doorman")
	touch(a, "bridge")
	touch(b, "bridge")
	_, err := FindPlugins([]string{a, b})
	if err == nil || !strings.Contains(err.Error(), "loopback, host-local not found in "+a+":"+b) {
		t.Fatalf("missing plugins: want an error naming loopback and host-local and the path, got %v", err)
	}
	touch(b, "loopback")
	touch(b, "host-local")
	found, err := FindPlugins([]string{a, b})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"doorman": filepath.Join(a, "doorman"), "bridge": filepath.Join(a, "bridge"),
		"loopback": filepath.Join(b, "loopback"), "host-local": filepath.Join(b, "host-local"),
	}
	if !reflect.DeepEqual(found, want) {
		t.Errorf("FindPlugins: got %v, want the first match of each: %v", found, want)
	}
}
