package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeBinary is enough of an ELF file for the image: mkimage checks the
// magic number only.
var fakeBinary = append([]byte("\x7fELF"), bytes.Repeat([]byte("doorman "), 1000)...)

func writeImage(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "doorman")
	if err := os.WriteFile(bin, fakeBinary, 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "image.tar")
	if err := writeArchive(out, options{binary: bin, name: name, arch: "amd64", version: "test", created: time.Unix(0, 0).UTC()}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLayout reads the archive as an OCI image layout: every blob is named
// by its digest, the manifest and config chain from index.json, the
// config's diff_id is the uncompressed layer's, and the layer holds
// /doorman, executable, owned by root.
func TestLayout(t *testing.T) {
	path := writeImage(t, "localhost/doorman:test")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(tr)
		files[h.Name] = b
	}
	if string(files["oci-layout"]) != `{"imageLayoutVersion":"1.0.0"}` {
		t.Errorf("oci-layout %q", files["oci-layout"])
	}
	blob := func(d descriptor) []byte {
		t.Helper()
		b, ok := files["blobs/sha256/"+strings.TrimPrefix(d.Digest, "sha256:")]
		if !ok {
			t.Fatalf("no blob %s", d.Digest)
		}
		sum := sha256.Sum256(b)
		if "sha256:"+hex.EncodeToString(sum[:]) != d.Digest || int64(len(b)) != d.Size {
			t.Fatalf("blob %s does not match its descriptor", d.Digest)
		}
		return b
	}
	var index struct {
		Manifests []descriptor `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, files["index.json"])
	}
	m := index.Manifests[0]
	if m.Annotations["io.containerd.image.name"] != "localhost/doorman:test" || m.Platform == nil || m.Platform.OS != "linux" {
		t.Errorf("index entry %+v", m)
	}
	var manifest struct {
		Config descriptor   `json:"config"`
		Layers []descriptor `json:"layers"`
	}
	if err := json.Unmarshal(blob(m), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	var config struct {
		Architecture string `json:"architecture"`
		Config       struct {
			Entrypoint []string `json:"Entrypoint"`
		} `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(blob(manifest.Config), &config); err != nil {
		t.Fatal(err)
	}
	if strings.Join(config.Config.Entrypoint, " ") != "/doorman install-cni" || config.Architecture != "amd64" {
		t.Errorf("config %+v", config)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(manifest.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	layer, _ := io.ReadAll(zr)
	sum := sha256.Sum256(layer)
	if len(config.RootFS.DiffIDs) != 1 || config.RootFS.DiffIDs[0] != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("diff_ids %v", config.RootFS.DiffIDs)
	}
	lr := tar.NewReader(bytes.NewReader(layer))
	h, err := lr.Next()
	if err != nil || h.Name != "doorman" || h.Mode != 0o755 || h.Uid != 0 || h.Gid != 0 {
		t.Fatalf("layer entry %+v, %v", h, err)
	}
	if b, _ := io.ReadAll(lr); !bytes.Equal(b, fakeBinary) {
		t.Error("the layer's /doorman is not the binary")
	}
	if _, err := lr.Next(); err != io.EOF {
		t.Error("the layer has more than /doorman")
	}
}

func TestReproducible(t *testing.T) {
	a, _ := os.ReadFile(writeImage(t, "localhost/doorman:test"))
	b, _ := os.ReadFile(writeImage(t, "localhost/doorman:test"))
	if !bytes.Equal(a, b) {
		t.Error("two builds of one binary differ")
	}
}

func TestRefusesNonELF(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "doorman")
	os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755)
	if err := writeArchive(filepath.Join(dir, "image.tar"), options{binary: bin, name: "x"}); err == nil {
		t.Error("a script was accepted as the binary")
	}
	if _, err := os.Stat(filepath.Join(dir, "image.tar")); err == nil {
		t.Error("an archive was written")
	}
}

// TestLoadWithPodman loads the archive into a private podman store.
func TestLoadWithPodman(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman is not installed")
	}
	path := writeImage(t, "localhost/doorman:mkimage-test")
	store := podmanStore(t)
	podman := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("podman", append([]string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"), "--storage-driver", "vfs"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("podman %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	podman("load", "-i", path)
	if got := podman("image", "inspect", "localhost/doorman:mkimage-test", "--format", "{{.Config.Entrypoint}}"); strings.TrimSpace(got) != "[/doorman install-cni]" {
		t.Errorf("entrypoint %q", got)
	}
}

// TestBuildContainerfileWithPodman builds the Containerfile beside mkimage with
// podman, with no network, into a private store: FROM scratch pulls
// nothing, and it makes the image mkimage makes.
func TestBuildContainerfileWithPodman(t *testing.T) {
	if _, err := exec.LookPath("podman"); err != nil {
		t.Skip("podman is not installed")
	}
	ctx := t.TempDir()
	os.Mkdir(filepath.Join(ctx, "bin"), 0o755)
	if err := os.WriteFile(filepath.Join(ctx, "bin", "doorman"), fakeBinary, 0o755); err != nil {
		t.Fatal(err)
	}
	containerfile, err := filepath.Abs("../Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	store := podmanStore(t)
	podman := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("podman", append([]string{"--root", filepath.Join(store, "root"), "--runroot", filepath.Join(store, "run"), "--storage-driver", "vfs"}, args...)...)
		cmd.Dir = ctx
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("podman %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	podman("build", "--network", "none", "-f", containerfile, "-t", "localhost/doorman:containerfile-test", ".")
	if got := podman("image", "inspect", "localhost/doorman:containerfile-test", "--format", "{{.Config.Entrypoint}}"); strings.TrimSpace(got) != "[/doorman install-cni]" {
		t.Errorf("entrypoint %q", got)
	}
}

// podmanStore is a private podman store, short-named: podman refuses a
// runroot path longer than 50 characters, as t.TempDir's can be.
func podmanStore(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "mkimage-podman-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// TestImportWithContainerd imports the archive, as the README says to, into a
// private containerd (its own root, state and socket; no CRI).
func TestImportWithContainerd(t *testing.T) {
	for _, tool := range []string{"containerd", "ctr"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed", tool)
		}
	}
	path := writeImage(t, "localhost/doorman:mkimage-test")
	dir, err := os.MkdirTemp("", "mkimage-ctd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "ctd.sock")
	config := `version = 2
root = "` + filepath.Join(dir, "root") + `"
state = "` + filepath.Join(dir, "state") + `"
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = "` + sock + `"
[plugins."io.containerd.internal.v1.opt"]
  path = "` + filepath.Join(dir, "opt") + `"
`
	os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o644)
	var log bytes.Buffer
	ctd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	ctd.Stdout, ctd.Stderr = &log, &log
	if err := ctd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctd.Process.Kill()
		ctd.Wait()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c, err := net.Dial("unix", sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not start:\n%s", log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	ctr := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ctr", append([]string{"-a", sock, "-n", "k8s.io"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ctr %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	ctr("images", "import", "--snapshotter", "native", path)
	if got := ctr("images", "ls", "-q"); !strings.Contains(got, "localhost/doorman:mkimage-test\n") {
		t.Errorf("images: %q", got)
	}
}
