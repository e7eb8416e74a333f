package cniinstall

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
)

// ConfExtensions are the extensions of the files a runtime reads from the
// CNI conf dir, as containerd's CRI and CRI-O pass them to libcni.ConfFiles.
var ConfExtensions = []string{".conf", ".conflist", ".json"}

// Names of doorman's own files in the conf and bin dirs. Their extensions
// are none of ConfExtensions, so no runtime loads them.
const (
	tmpInfix     = ".doorman-tmp-"
	backupSuffix = ".doorman-backup"
)

// ErrNoPrimary is the error of Primary when the conf dir holds no valid
// network configuration (yet: on a new node the primary CNI writes it when
// its agent starts).
var ErrNoPrimary = errors.New("no valid network configuration")

// Skipped is a network configuration file Primary passed over, and why.
type Skipped struct {
	Path string
	Err  error
}

// Primary returns the network configuration the runtime uses: of the files
// libcni.ConfFiles lists in dir (.conf, .conflist, .json), sorted, the first
// that loads (see Loadable), with those before it that did not. A missing
// dir is an error; a dir with no valid file is ErrNoPrimary.
func Primary(dir string) (path string, skipped []Skipped, err error) {
	files, err := confFiles(dir)
	if err != nil {
		return "", nil, err
	}
	for _, f := range files {
		if err := Loadable(f); err != nil {
			skipped = append(skipped, Skipped{f, err})
			continue
		}
		return f, skipped, nil
	}
	return "", skipped, fmt.Errorf("%s: %w", dir, ErrNoPrimary)
}

// confFiles lists dir's network configuration files, sorted, as the
// runtimes do. Unlike libcni.ConfFiles it reports a missing dir.
func confFiles(dir string) ([]string, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("CNI conf dir: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("CNI conf dir %s: not a directory", dir)
	}
	files, err := libcni.ConfFiles(dir, ConfExtensions)
	if err != nil {
		return nil, fmt.Errorf("CNI conf dir %s: %w", dir, err)
	}
	sort.Strings(files)
	return files, nil
}

// Loadable says why the runtimes would not load the network configuration
// at path, as containerd's go-cni and CRI-O's ocicni judge it: a .conflist
// must load with libcni.ConfListFromFile and have a plugin; a .conf or
// .json must load with libcni.ConfFromFile, have a type, and convert to a
// list.
func Loadable(path string) error {
	if strings.HasSuffix(path, ".conflist") {
		l, err := libcni.ConfListFromFile(path)
		if err != nil {
			return err
		}
		if len(l.Plugins) == 0 {
			return errors.New("no plugins")
		}
		return nil
	}
	c, err := libcni.ConfFromFile(path)
	if err != nil {
		return err
	}
	if c.Network.Type == "" {
		return errors.New("no type; perhaps this is a .conflist?")
	}
	_, err = libcni.ConfListFromConf(c)
	return err
}

// conflistName is the .conflist a single-plugin configuration at path is
// converted to: the same name with the extension .conflist.
func conflistName(path string) string {
	return strings.TrimSuffix(path, filepath.Ext(path)) + ".conflist"
}

// backupName is where the original of a converted configuration is kept.
func backupName(path string) string { return path + backupSuffix }

// isTempFile reports whether name is one of doorman's temporary files.
func isTempFile(name string) bool {
	base := filepath.Base(name)
	return strings.HasPrefix(base, ".") && strings.Contains(base, tmpInfix)
}
