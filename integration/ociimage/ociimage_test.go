package ociimage

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFromDir reads back an archive FromDir wrote: the index names the
// image as containerd's importer reads it, every blob matches its digest,
// and the one layer holds the tree.
func TestFromDir(t *testing.T) {
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "etc", "hello"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(dir, "image.tar")
	if err := FromDir(archive, rootfs, "localhost/x:test", Config{Entrypoint: []string{"/x"}}); err != nil {
		t.Fatal(err)
	}
	files := readTar(t, archive)
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(files["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v\n%s", err, files["index.json"])
	}
	m := index.Manifests[0]
	if m.Annotations["io.containerd.image.name"] != "localhost/x:test" || m.Annotations["org.opencontainers.image.ref.name"] != "test" {
		t.Errorf("annotations %v", m.Annotations)
	}
	for name, data := range files {
		if hexName, ok := strings.CutPrefix(name, "blobs/sha256/"); ok && hexName != "" {
			if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != hexName {
				t.Errorf("blob %s does not match its digest", name)
			}
		}
	}
	var manifest struct {
		Config struct{ Digest string }   `json:"config"`
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(m.Digest, "sha256:")], &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	var config struct {
		Config Config `json:"config"`
	}
	if err := json.Unmarshal(files["blobs/sha256/"+strings.TrimPrefix(manifest.Config.Digest, "sha256:")], &config); err != nil || strings.Join(config.Config.Entrypoint, " ") != "/x" {
		t.Errorf("config: %v %+v", err, config)
	}
	layer := filepath.Join(dir, "layer.tar")
	if err := os.WriteFile(layer, files["blobs/sha256/"+strings.TrimPrefix(manifest.Layers[0].Digest, "sha256:")], 0o644); err != nil {
		t.Fatal(err)
	}
	if got := string(readTar(t, layer)["etc/hello"]); got != "hi\n" {
		t.Errorf("layer's etc/hello: %q", got)
	}
}

func readTar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[h.Name] = data
	}
}
