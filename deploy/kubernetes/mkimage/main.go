// Command mkimage writes doorman's container image, the one the DaemonSet in
// deploy/kubernetes runs, as an OCI image layout in a tar archive: one layer
// holding the static doorman binary as /doorman, and `doorman install-cni`
// as the entrypoint. It is what the Containerfile beside it describes,
// built without a container engine and without a registry (a FROM scratch
// image pulls nothing), so that `make image` works on any machine with Go.
// The archive loads with `ctr -n k8s.io images import` on a containerd node
// and with `podman load`.
//
// The output is reproducible: the layer's files have a fixed time (the
// SOURCE_DATE_EPOCH environment variable, else the Unix epoch), root as
// owner, and no gzip name or time, so the same binary gives the same
// digests.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.binary, "binary", "bin/doorman", "the static doorman `binary`")
	flag.StringVar(&o.agent, "agent", "", "the static doorman-agent `binary`, /doorman-agent in the image (\"\": none)")
	flag.StringVar(&o.name, "name", "localhost/doorman:latest", "the image's `reference`")
	flag.StringVar(&o.arch, "arch", runtime.GOARCH, "the binary's GOARCH")
	flag.StringVar(&o.version, "version", "", "the image's version label")
	out := flag.String("o", "bin/doorman-image.tar", "the archive to write")
	flag.Parse()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		sec, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			fmt.Fprintf(os.Stderr, "mkimage: SOURCE_DATE_EPOCH %q: not a number of seconds\n", s)
			os.Exit(2)
		}
		o.created = time.Unix(sec, 0).UTC()
	} else {
		o.created = time.Unix(0, 0).UTC()
	}
	if err := writeArchive(*out, o); err != nil {
		fmt.Fprintf(os.Stderr, "mkimage: %v\n", err)
		os.Exit(1)
	}
}

// options say what image to make.
type options struct {
	binary, agent, name, arch, version string
	created                            time.Time
}

// Media types of the OCI image spec.
const (
	mediaIndex    = "application/vnd.oci.image.index.v1+json"
	mediaManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaConfig   = "application/vnd.oci.image.config.v1+json"
	mediaLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"
)

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type blob struct {
	desc descriptor
	data []byte
}

func newBlob(mediaType string, data []byte) blob {
	sum := sha256.Sum256(data)
	return blob{descriptor{MediaType: mediaType, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(data))}, data}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// writeArchive writes the image to path, through a temporary file renamed
// into place.
func writeArchive(path string, o options) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := build(f, o); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// build writes the image as an OCI layout tar archive to w.
func build(w io.Writer, o options) error {
	bin, err := os.ReadFile(o.binary)
	if err != nil {
		return fmt.Errorf("read the binary: %w", err)
	}
	if len(bin) < 4 || !bytes.Equal(bin[:4], []byte("\x7fELF")) {
		return fmt.Errorf("%s is not an ELF binary: build it with `make build` (CGO_ENABLED=0, static)", o.binary)
	}
	files := []file{{"doorman", bin}}
	if o.agent != "" {
		ab, err := os.ReadFile(o.agent)
		if err != nil {
			return fmt.Errorf("read the agent binary: %w", err)
		}
		if len(ab) < 4 || !bytes.Equal(ab[:4], []byte("\x7fELF")) {
			return fmt.Errorf("%s is not an ELF binary: build it with `make build` (CGO_ENABLED=0, static)", o.agent)
		}
		files = append(files, file{"doorman-agent", ab})
	}
	layerTar, err := layer(files, o.created)
	if err != nil {
		return err
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if _, err := zw.Write(layerTar); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	layerBlob := newBlob(mediaLayer, gz.Bytes())
	diffID := sha256.Sum256(layerTar)

	labels := map[string]string{"org.opencontainers.image.title": "doorman"}
	if o.version != "" {
		labels["org.opencontainers.image.version"] = o.version
	}
	config := newBlob(mediaConfig, mustJSON(map[string]any{
		"created":      o.created.Format(time.RFC3339),
		"architecture": o.arch,
		"os":           "linux",
		"config": map[string]any{
			"Entrypoint": []string{"/doorman", "install-cni"},
			"Labels":     labels,
		},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
		"history": []map[string]any{{
			"created":    o.created.Format(time.RFC3339),
			"created_by": "mkimage: COPY bin/doorman /doorman (and bin/doorman-agent /doorman-agent)",
		}},
	}))
	manifest := newBlob(mediaManifest, mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaManifest,
		"config":        config.desc,
		"layers":        []descriptor{layerBlob.desc},
	}))
	md := manifest.desc
	md.Platform = &platform{Architecture: o.arch, OS: "linux"}
	// containerd names the image by io.containerd.image.name; podman and
	// other OCI tools by ref.name, which may hold the full reference.
	md.Annotations = map[string]string{
		"io.containerd.image.name":          o.name,
		"org.opencontainers.image.ref.name": o.name,
	}
	index := mustJSON(map[string]any{
		"schemaVersion": 2,
		"mediaType":     mediaIndex,
		"manifests":     []descriptor{md},
	})

	tw := tar.NewWriter(w)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: o.created, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "blobs/", Mode: 0o755, ModTime: o.created, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "blobs/sha256/", Mode: 0o755, ModTime: o.created, Typeflag: tar.TypeDir, Format: tar.FormatPAX}); err != nil {
		return err
	}
	for _, b := range []blob{layerBlob, config, manifest} {
		if err := add("blobs/sha256/"+b.desc.Digest[len("sha256:"):], b.data); err != nil {
			return err
		}
	}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	if err := add("index.json", index); err != nil {
		return err
	}
	return tw.Close()
}

// file is one executable of the image.
type file struct {
	name string
	data []byte
}

// layer is the image's one layer: /doorman (and /doorman-agent), mode
// 0755, owned by root.
func layer(files []file, mtime time.Time) ([]byte, error) {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o755, Size: int64(len(f.data)), ModTime: mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
