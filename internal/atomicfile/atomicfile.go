// Package atomicfile replaces files so that a reader sees the old content
// or the new, never a part: the new content goes to a temporary file in the
// same directory, which is renamed over the old one.
//
// doorman writes policy files that a running proxy is watching, state that
// the CLI reads while a CNI verb writes it, a supervisor's status file, the
// proxy's config file, a container's OCI config.json (the hook), a `doorman
// run` record, and the CA's key and certificate: all of them go through
// Write. Two writers need more than a plain rename and keep their own on
// top of the same temporary-file scheme: the Kubernetes installer (package
// cniinstall) replaces the node's CNI configuration and plugin binary only
// if no other writer changed them since it read them (renameat2's
// RENAME_EXCHANGE and RENAME_NOREPLACE), and the CA's rotation writes its
// new key with Write and renames it over the old one once the new
// certificate is in place. The image builder (deploy/kubernetes/mkimage),
// which streams its archive into the temporary file, renames its own.
package atomicfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// Options say how Write writes.
type Options struct {
	// Perm is the new file's mode.
	Perm fs.FileMode
	// Durable syncs the file before the rename and the directory after
	// it, so that the new content survives a crash. Files that do not
	// outlive a reboot (on a tmpfs such as /run) can leave it off and
	// save the syncs.
	Durable bool
	// TempInfix names the temporary file: "." + base name + TempInfix +
	// a random suffix. Default ".tmp-". A reader that lists the
	// directory (libcni loading *.conf) must not take it for a real
	// file, so it starts with a dot and keeps no extension of base.
	TempInfix string
}

// Write replaces path with what r yields. On any error nothing is renamed
// and the temporary file is removed.
func Write(path string, r io.Reader, o Options) (err error) {
	dir := filepath.Dir(path)
	infix := o.TempInfix
	if infix == "" {
		infix = ".tmp-"
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+infix+"*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if _, err = io.Copy(f, r); err != nil {
		return err
	}
	if err = f.Chmod(o.Perm); err != nil {
		return err
	}
	if o.Durable {
		if err = f.Sync(); err != nil {
			return err
		}
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if o.Durable {
		if err := SyncDir(dir); err != nil {
			return fmt.Errorf("sync %s: %w", dir, err)
		}
	}
	return nil
}

// SyncDir fsyncs a directory, so that a rename or removal in it survives a
// crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
