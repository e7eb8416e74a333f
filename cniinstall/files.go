package cniinstall

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/doorman-net/doorman/internal/atomicfile"

	"golang.org/x/sys/unix"
)

// errChanged is returned by the checked writes when the target changed
// between being read and being replaced: another writer (the primary CNI)
// got there in between, and the pass must be made again on its content.
var errChanged = errors.New("changed by another writer while being edited")

// writeChecked replaces path with data atomically: a temporary file in the
// same directory, synced, swapped with path, and the directory synced. It
// is a compare-and-swap: it gives up with errChanged, leaving path as
// another writer left it, unless path held expect (or was absent, for a
// nil expect) at the moment of the swap. The new file takes the mode and
// owner of like, the file it replaces or derives from (0644 and the
// caller's when like is absent).
//
// The swap is renameat2(RENAME_EXCHANGE): the old file lands on the
// temporary name, where it is compared with expect; if another writer
// (the primary CNI) had replaced or rewritten path just before, its file
// is swapped back, so its write is never lost. A runtime reading path in
// between sees doorman's version, a whole file either way. A new file is
// put in place with RENAME_NOREPLACE. Where the filesystem has neither,
// path is compared just before a plain rename.
func writeChecked(path string, data, expect []byte, like string) (err error) {
	perm, uid, gid := fs.FileMode(0o644), -1, -1
	if fi, serr := os.Stat(like); serr == nil {
		perm = fi.Mode().Perm()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
	}
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+tmpInfix+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	swapping := false
	defer func() {
		if err != nil && !swapping {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = f.Write(data); err != nil {
		return err
	}
	if err = f.Chmod(perm); err != nil {
		return err
	}
	if uid >= 0 {
		if err = f.Chown(uid, gid); err != nil {
			return err
		}
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	// From here on swapChecked disposes of tmp.
	swapping = true
	if err = swapChecked(tmp, path, expect); err != nil {
		return err
	}
	return atomicfile.SyncDir(dir)
}

// swapChecked puts tmp in place of path if path holds expect (is absent,
// for a nil expect), and removes what it replaced. Otherwise it leaves
// path as the other writer left it, removes tmp, and returns errChanged.
func swapChecked(tmp, path string, expect []byte) error {
	changed := fmt.Errorf("%s: %w", path, errChanged)
	if expect == nil {
		err := unix.Renameat2(unix.AT_FDCWD, tmp, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS):
			return renameIfExpected(tmp, path, expect)
		case errors.Is(err, unix.EEXIST):
			err = changed
		}
		os.Remove(tmp)
		return err
	}
	ours, err := os.Lstat(tmp)
	if err != nil {
		return err
	}
	err = exchange(tmp, path)
	switch {
	case errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOSYS):
		return renameIfExpected(tmp, path, expect)
	case errors.Is(err, unix.ENOENT):
		os.Remove(tmp)
		return changed
	case err != nil:
		os.Remove(tmp)
		return err
	}
	// tmp is now the file that was at path.
	if expectContent(tmp, expect) == nil {
		return os.Remove(tmp)
	}
	// Another writer got there first: its file goes back. Each swap puts
	// the newest of its files we hold back at path and takes out what is
	// there: ours or a file we held before means path has its newest
	// again; anything else is a still newer write, which goes back in turn.
	seen := []fs.FileInfo{ours}
	for range 8 {
		newest, err := os.Lstat(tmp)
		if err != nil {
			return err
		}
		if err := exchange(tmp, path); err != nil {
			if errors.Is(err, unix.ENOENT) {
				// It removed the file since: so be it.
				os.Remove(tmp)
				return changed
			}
			return fmt.Errorf("%s changed while being replaced, and putting back its new content failed: %w (the content is in %s)", path, err, tmp)
		}
		out, err := os.Lstat(tmp)
		if err != nil {
			return err
		}
		for _, s := range seen {
			if os.SameFile(out, s) {
				os.Remove(tmp)
				return changed
			}
		}
		seen = append(seen, newest)
	}
	return fmt.Errorf("%s: another writer keeps replacing it (its last file is in %s): %w", path, tmp, errChanged)
}

// exchange swaps the names a and b atomically.
func exchange(a, b string) error {
	return unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE)
}

// renameIfExpected is swapChecked without renameat2: compare, then rename.
func renameIfExpected(tmp, path string, expect []byte) error {
	if err := expectContent(path, expect); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

// expectContent checks that path holds expect, or is absent if expect is
// nil.
func expectContent(path string, expect []byte) error {
	cur, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && expect == nil:
		return nil
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return err
	case err != nil || expect == nil || !bytes.Equal(cur, expect):
		return fmt.Errorf("%s: %w", path, errChanged)
	}
	return nil
}

// removeChecked removes path if it holds expect, and syncs its directory.
// It moves path aside first and compares what it moved, so that a file
// another writer put there just before is put back, not lost.
func removeChecked(path string, expect []byte) error {
	aside := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+tmpInfix+"removed")
	if err := os.Rename(path, aside); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%s: %w", path, errChanged)
		}
		return err
	}
	if err := expectContent(aside, expect); err != nil {
		// Put it back, unless a newer one is there already.
		rerr := unix.Renameat2(unix.AT_FDCWD, aside, unix.AT_FDCWD, path, unix.RENAME_NOREPLACE)
		if errors.Is(rerr, unix.EINVAL) || errors.Is(rerr, unix.ENOSYS) {
			if _, serr := os.Lstat(path); errors.Is(serr, fs.ErrNotExist) {
				rerr = os.Rename(aside, path)
			}
		}
		if rerr != nil {
			os.Remove(aside)
		}
		return err
	}
	if err := os.Remove(aside); err != nil {
		return err
	}
	return atomicfile.SyncDir(filepath.Dir(path))
}

// lockDir takes an exclusive flock on dir, so that two installers on one
// node (the DaemonSet's and one run by hand) do not interleave their
// passes. The lock goes with the returned file.
func lockDir(dir string) (*os.File, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		d.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return d, nil
}

// sameContent reports whether files a and b hold the same bytes; a missing
// b is false.
func sameContent(a, b string) (bool, error) {
	fa, err := os.Open(a)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer fb.Close()
	sa, err := fa.Stat()
	if err != nil {
		return false, err
	}
	sb, err := fb.Stat()
	if err != nil {
		return false, err
	}
	if os.SameFile(sa, sb) {
		return true, nil
	}
	if sa.Size() != sb.Size() || !sb.Mode().IsRegular() {
		return false, nil
	}
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if erra == io.EOF || erra == io.ErrUnexpectedEOF {
			return errb == io.EOF || errb == io.ErrUnexpectedEOF, nil
		}
		if erra != nil {
			return false, erra
		}
		if errb != nil {
			return false, errb
		}
	}
}

// copyFile copies src to dst atomically (a temporary file beside dst,
// synced, renamed over it, the directory synced) with mode perm. A running
// process started from the old dst keeps its file; the next exec gets the
// new one.
func copyFile(src, dst string, perm fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.Write(dst, in, atomicfile.Options{Perm: perm, Durable: true, TempInfix: tmpInfix})
}
