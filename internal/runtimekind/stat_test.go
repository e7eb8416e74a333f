package runtimekind

import (
	"io/fs"
	"syscall"
	"testing"
)

func statIDs(t *testing.T, fi fs.FileInfo) (dev, ino uint64) {
	t.Helper()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		t.Skip("no stat_t")
	}
	return uint64(st.Dev), st.Ino
}
