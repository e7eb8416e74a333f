package integration

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The images the CRI tests import into their containerd: the sandbox
// image every pod starts with, and the probe image its containers run.
// No registry is reachable, so both are built here and imported with
// `ctr images import`.
const (
	criPauseImage = "localhost/dm-pause:test"
	criProbeImage = "localhost/dm-probe:test"
)

// buildPauseImage builds integration/pause, a static binary that blocks
// until SIGTERM, and packs it as the one-layer OCI archive of
// criPauseImage under dir, whose path it returns.
func buildPauseImage(t testing.TB, dir string) string {
	t.Helper()
	rootfs := filepath.Join(dir, "pause-rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	build := exec.Command("go", "build", "-o", filepath.Join(rootfs, "pause"), "github.com/doorman-net/doorman/integration/pause")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the pause program: %v\n%s", err, out)
	}
	layer := filepath.Join(dir, "pause-rootfs.tar")
	if err := writeTar(layer, rootfs); err != nil {
		t.Fatalf("archive the pause rootfs: %v", err)
	}
	archive := filepath.Join(dir, "pause-image.tar")
	if err := writeOCIArchive(archive, layer, criPauseImage, ociImageConfig{Entrypoint: []string{"/pause"}}); err != nil {
		t.Fatalf("write the pause image: %v", err)
	}
	return archive
}

// buildCRIProbeImage packs the probe rootfs (see buildProbeImage: the
// probe, the test CA, busybox's sh) as the one-layer OCI archive of
// criProbeImage under dir, whose path it returns.
func buildCRIProbeImage(t testing.TB, dir string, caPEM []byte) string {
	t.Helper()
	tt, ok := t.(*testing.T)
	if !ok {
		// buildProbeImage takes a *testing.T; a benchmark has none, and
		// runs no probe.
		t.Fatal("buildCRIProbeImage needs a *testing.T")
	}
	layer := buildProbeImage(tt, dir, caPEM)
	archive := filepath.Join(dir, "probe-image.tar")
	if err := writeOCIArchive(archive, layer, criProbeImage, ociImageConfig{Env: []string{"PATH=/bin:/"}}); err != nil {
		t.Fatalf("write the probe image: %v", err)
	}
	return archive
}

// ociImageConfig is the part of an OCI image configuration's "config"
// object these images set.
type ociImageConfig struct {
	Env        []string `json:"Env,omitempty"`
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
}

// writeOCIArchive writes an OCI image layout, as a tar file at path,
// holding one image named ref for this machine's platform: its only layer
// is the (uncompressed) tar file layer, its configuration config. The
// index names the image both ways containerd's importer reads
// (io.containerd.image.name, and the OCI ref name for the tag), so that
// `ctr images import` stores it as ref without --base-name.
func writeOCIArchive(path, layer, ref string, config ociImageConfig) error {
	layerData, err := os.ReadFile(layer)
	if err != nil {
		return err
	}
	platform := map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	configData, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       config,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{digestOf(layerData)}},
	})
	if err != nil {
		return err
	}
	manifestData, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        ociDescriptor("application/vnd.oci.image.config.v1+json", configData),
		"layers":        []any{ociDescriptor("application/vnd.oci.image.layer.v1.tar", layerData)},
	})
	if err != nil {
		return err
	}
	manifest := ociDescriptor("application/vnd.oci.image.manifest.v1+json", manifestData)
	manifest["platform"] = platform
	tag := ref[strings.LastIndex(ref, ":")+1:]
	manifest["annotations"] = map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": tag,
	}
	indexData, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []any{manifest},
	})
	if err != nil {
		return err
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	out := tar.NewWriter(f)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", indexData},
	}
	for _, blob := range [][]byte{layerData, configData, manifestData} {
		files = append(files, struct {
			name string
			data []byte
		}{"blobs/sha256/" + hexDigest(blob), blob})
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err = out.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			break
		}
	}
	for _, file := range files {
		if err != nil {
			break
		}
		if err = out.WriteHeader(&tar.Header{Name: file.name, Mode: 0o644, Size: int64(len(file.data))}); err != nil {
			break
		}
		_, err = out.Write(file.data)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write the OCI archive %s: %w", path, err)
	}
	return nil
}

// ociDescriptor describes data as a blob of mediaType.
func ociDescriptor(mediaType string, data []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digestOf(data), "size": len(data)}
}

func hexDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func digestOf(data []byte) string { return "sha256:" + hexDigest(data) }
