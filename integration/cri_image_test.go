package integration

import (
	"path/filepath"
	"testing"

	"github.com/doorman-net/doorman/integration/ociimage"
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
// criPauseImage under dir, whose path it returns (see ociimage.Pause).
func buildPauseImage(t testing.TB, dir string) string {
	t.Helper()
	archive, err := ociimage.Pause(dir, criPauseImage)
	if err != nil {
		t.Fatal(err)
	}
	return archive
}

// buildCRIProbeImage packs the probe rootfs (see buildProbeImage: the
// probe, the test CA, busybox's sh) as the one-layer OCI archive of
// criProbeImage under dir, whose path it returns.
func buildCRIProbeImage(t testing.TB, dir string, caPEM []byte) string {
	t.Helper()
	layer := buildProbeImage(t, dir, caPEM)
	archive := filepath.Join(dir, "probe-image.tar")
	if err := ociimage.Write(archive, layer, criProbeImage, ociimage.Config{Env: []string{"PATH=/bin:/"}}); err != nil {
		t.Fatalf("write the probe image: %v", err)
	}
	return archive
}
