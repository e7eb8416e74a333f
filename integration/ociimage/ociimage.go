// Package ociimage writes the container images doorman's end-to-end tests
// run: one-layer OCI image layouts in tar archives, made from a directory
// tree (a static Go binary, a CA file, busybox), that `ctr images import`
// and `podman load` read. The tests' container runtimes can reach no
// registry, so every image they run (a pod's sandbox or "pause" image, the
// probe image) is built this way and imported.
//
// It is a normal package, shared by the CRI tests (package integration)
// and the Kubernetes cluster harness (integration/k8scluster).
package ociimage

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
)

// Config is the part of an OCI image configuration's "config" object the
// tests' images set.
type Config struct {
	Env        []string `json:"Env,omitempty"`
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
}

// TarDir writes the tree under dir to the tar file path.
func TarDir(path, dir string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	err = tw.AddFS(os.DirFS(dir))
	if cerr := tw.Close(); err == nil {
		err = cerr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("archive %s into %s: %w", dir, path, err)
	}
	return nil
}

// Write writes an OCI image layout, as a tar file at path, holding one
// image named ref (name:tag) for this machine's platform: its only layer
// is the (uncompressed) tar file layer, its configuration config. The
// index names the image both ways containerd's importer reads
// (io.containerd.image.name, and the OCI ref name for the tag), so that
// `ctr images import` stores it as ref without --base-name.
func Write(path, layer, ref string, config Config) error {
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
		"config":        descriptor("application/vnd.oci.image.config.v1+json", configData),
		"layers":        []any{descriptor("application/vnd.oci.image.layer.v1.tar", layerData)},
	})
	if err != nil {
		return err
	}
	manifest := descriptor("application/vnd.oci.image.manifest.v1+json", manifestData)
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
	type file struct {
		name string
		data []byte
	}
	files := []file{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", indexData},
	}
	for _, blob := range [][]byte{layerData, configData, manifestData} {
		files = append(files, file{"blobs/sha256/" + hexDigest(blob), blob})
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err = out.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			break
		}
	}
	for _, fl := range files {
		if err != nil {
			break
		}
		if err = out.WriteHeader(&tar.Header{Name: fl.name, Mode: 0o644, Size: int64(len(fl.data))}); err != nil {
			break
		}
		_, err = out.Write(fl.data)
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

// FromDir packs the tree under rootfs as the one layer of image ref with
// config, writing the layer to path+".layer" and the archive to path.
func FromDir(path, rootfs, ref string, config Config) error {
	layer := path + ".layer"
	if err := TarDir(layer, rootfs); err != nil {
		return err
	}
	return Write(path, layer, ref, config)
}

// descriptor describes data as a blob of mediaType.
func descriptor(mediaType string, data []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digestOf(data), "size": len(data)}
}

func hexDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func digestOf(data []byte) string { return "sha256:" + hexDigest(data) }

// PausePackage is the sandbox ("pause") program the tests' pods start
// with (see integration/pause).
const PausePackage = "github.com/doorman-net/doorman/integration/pause"

// Pause builds PausePackage, a static binary that blocks until SIGTERM,
// and packs it as /pause, the entrypoint of the one-layer image ref, in
// an archive under dir, whose path it returns. go must be on PATH and the
// working directory inside doorman's module (a test's is).
func Pause(dir, ref string) (string, error) {
	rootfs := filepath.Join(dir, "pause-rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return "", err
	}
	build := exec.Command("go", "build", "-o", filepath.Join(rootfs, "pause"), PausePackage)
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the pause program: %w\n%s", err, out)
	}
	archive := filepath.Join(dir, "pause-image.tar")
	if err := FromDir(archive, rootfs, ref, Config{Entrypoint: []string{"/pause"}}); err != nil {
		return "", fmt.Errorf("write the pause image: %w", err)
	}
	return archive, nil
}
