package cniinstall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// BinaryName is the name of doorman's binary in the CNI bin dir: the type
// of its conflist entry.
const BinaryName = PluginType

// Installer puts doorman into a node's primary network configuration and
// keeps it there. Its methods are not safe for concurrent use; installers
// in different processes serialize their passes with a lock on ConfDir.
type Installer struct {
	// BinDir and ConfDir are the node's CNI bin and conf dirs.
	BinDir, ConfDir string
	// Binary is the doorman binary copied into BinDir as "doorman";
	// empty installs none.
	Binary string
	// Config is the entry's settings (DefaultConfig when nil).
	Config *Config
	// Log gets a line for every change, naming the file and why (none
	// when nil).
	Log *slog.Logger

	// Debounce is how long Watch waits for a burst of events to settle
	// (default 100ms), MaxDelay the longest it lets one burst postpone a
	// pass (default 500ms), and Resync how often it makes a pass without
	// an event, in case one was missed (default 30s).
	Debounce, MaxDelay, Resync time.Duration

	// lastPrimary is the primary configuration of the last pass, and
	// wrote the files the installer has put its entry into, for the
	// reasons in the log.
	lastPrimary string
	wrote       map[string]bool
	// binChecked is what BinDir's doorman looked like when it was last
	// found identical to Binary, so that an unchanged file is not read
	// again on every pass.
	binChecked fs.FileInfo
}

// Change is one thing a pass changed (or, for Check, would change).
type Change struct {
	// Path is the file changed.
	Path string
	// Action is what was done to it: "installed", "wrote", "converted",
	// "removed", "restored".
	Action string
	// Reason says why.
	Reason string
}

func (c Change) String() string { return c.Action + " " + c.Path + ": " + c.Reason }

func (in *Installer) config() *Config {
	if in.Config == nil {
		return DefaultConfig()
	}
	return in.Config
}

func (in *Installer) log(ch Change) {
	if in.Log != nil {
		in.Log.Info(ch.Action, "file", ch.Path, "reason", ch.Reason)
	}
}

// Install makes one pass: it installs the binary if it differs, then puts
// doorman's entry into the primary network configuration, converting a
// single-plugin one to a conflist first. A node already as the pass would
// leave it is not touched. It returns what it changed.
func (in *Installer) Install() ([]Change, error) {
	var err error
	for try := 0; try < 5; try++ {
		var changes []Change
		changes, err = in.pass(false)
		if !errors.Is(err, errChanged) {
			return changes, err
		}
	}
	return nil, err
}

// Check reports whether Install would change anything: nil when the binary
// is in place and the primary configuration has doorman's entry as Install
// writes it, else an error listing what is missing.
func (in *Installer) Check() error {
	changes, err := in.pass(true)
	if err != nil {
		return err
	}
	return pending(changes, "installed")
}

// pending is the error of a check that found changes to make: the node is
// not as state ("installed", "uninstalled").
func pending(changes []Change, state string) error {
	if len(changes) == 0 {
		return nil
	}
	var s []string
	for _, c := range changes {
		s = append(s, c.String())
	}
	return fmt.Errorf("not as %s: would have %s", state, strings.Join(s, "; "))
}

// pass is one Install pass; with dry set it changes nothing and returns
// what it would change. It decides the edit of the configuration first and
// installs the binary second, so that a configuration it refuses leaves
// the node untouched, and writes the configuration last, so that the entry
// never names a binary that is not there yet.
func (in *Installer) pass(dry bool) ([]Change, error) {
	if !dry {
		lock, err := lockDir(in.ConfDir)
		if err != nil {
			return nil, err
		}
		defer lock.Close()
	}
	primary, _, err := Primary(in.ConfDir)
	if err != nil {
		return nil, err
	}
	fi, err := os.Lstat(primary)
	if err != nil {
		return nil, err
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil, fmt.Errorf("%s is a symbolic link: doorman edits only regular files (replace the link with the file it names)", primary)
	}
	data, err := os.ReadFile(primary)
	if err != nil {
		return nil, err
	}
	became := ""
	if in.lastPrimary != "" && in.lastPrimary != primary {
		became = fmt.Sprintf("it became the primary network configuration (was %s)", filepath.Base(in.lastPrimary))
	}
	var e *edit
	if strings.HasSuffix(primary, ".conflist") {
		e, err = in.planConflist(primary, data, became)
	} else {
		e, err = in.planConversion(primary, data, became)
	}
	if err != nil {
		return nil, err
	}

	var changes []Change
	record := func(c Change) {
		changes = append(changes, c)
		if !dry {
			in.log(c)
		}
	}
	if !dry {
		in.removeLeftovers(record)
	}
	if ch, err := in.installBinary(dry); err != nil {
		return nil, err
	} else if ch != nil {
		record(*ch)
	}
	if e != nil {
		if !dry {
			if err := e.apply(); err != nil {
				return changes, err
			}
		}
		record(e.Change)
	}
	if !dry {
		in.lastPrimary = primary
		in.markWrote(e.target(primary))
	}
	return changes, nil
}

// removeLeftovers removes the temporary files an interrupted pass left in
// the conf and bin dirs. It runs under the conf dir's lock, so no other
// installer's pass is writing one.
func (in *Installer) removeLeftovers(record func(Change)) {
	for _, dir := range []string{in.ConfDir, in.BinDir} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !isTempFile(e.Name()) || e.IsDir() {
				continue
			}
			p := filepath.Join(dir, e.Name())
			if os.Remove(p) == nil {
				record(Change{p, "removed", "a temporary file of an interrupted doorman write"})
			}
		}
	}
}

// edit is a planned change of the conf dir: what it is, and the writes
// that make it.
type edit struct {
	Change
	apply func() error
}

// target is the conflist that has doorman's entry after e (or after no
// edit, primary).
func (e *edit) target(primary string) string {
	if e == nil {
		return primary
	}
	return e.Path
}

// installBinary copies Binary into BinDir unless it is there already; with
// dry set it only says whether it would.
func (in *Installer) installBinary(dry bool) (*Change, error) {
	if in.Binary == "" {
		return nil, nil
	}
	dst := filepath.Join(in.BinDir, BinaryName)
	cur, err := os.Stat(dst)
	if err == nil && in.binChecked != nil && sameStat(cur, in.binChecked) {
		return nil, nil
	}
	same, err := sameContent(in.Binary, dst)
	if err != nil {
		return nil, fmt.Errorf("compare %s with %s: %w", in.Binary, dst, err)
	}
	if same && cur.Mode().Perm()&0o111 != 0 {
		in.binChecked = cur
		return nil, nil
	}
	reason := "no doorman binary there"
	switch {
	case same:
		reason = "it is not executable"
	case cur != nil:
		reason = "it differs from this installer's binary"
	}
	if !dry {
		if err := copyFile(in.Binary, dst, 0o755); err != nil {
			return nil, fmt.Errorf("install %s: %w", dst, err)
		}
		in.binChecked, _ = os.Stat(dst)
	}
	return &Change{dst, "installed", reason}, nil
}

// sameStat reports whether a and b describe the same unchanged file.
func sameStat(a, b fs.FileInfo) bool {
	return os.SameFile(a, b) && a.Size() == b.Size() && a.ModTime().Equal(b.ModTime()) && a.Mode() == b.Mode()
}

// planConflist plans putting doorman's entry into the conflist at path,
// which holds data; nil when it is there already as Install writes it.
func (in *Installer) planConflist(path string, data []byte, became string) (*edit, error) {
	if err := inlineOnly(path, data); err != nil {
		return nil, err
	}
	out, err := withEntry(data, in.config())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if bytes.Equal(out, data) {
		return nil, nil
	}
	return &edit{
		Change: Change{path, "wrote", in.reason(path, data, became)},
		apply: func() error {
			if err := writeChecked(path, out, data, path); err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
			return nil
		},
	}, nil
}

func (in *Installer) markWrote(path string) {
	if in.wrote == nil {
		in.wrote = map[string]bool{}
	}
	in.wrote[path] = true
}

// reason says why a conflist's entry is (re)written.
func (in *Installer) reason(path string, data []byte, became string) string {
	c, err := parseConflist(data)
	switch {
	case became != "":
		return "appended doorman's entry: " + became
	case err == nil && len(c.doorman()) > 1:
		return fmt.Sprintf("it had %d doorman entries: kept one, with the installer's settings", len(c.doorman()))
	case err == nil && len(c.doorman()) == 1:
		return "doorman's entry differs from the installer's settings: replaced it where it stands"
	case in.wrote[path]:
		return "appended doorman's entry: the file was rewritten without it (the primary CNI rewrote or replaced it)"
	default:
		return "appended doorman's entry"
	}
}

// inlineOnly refuses a conflist whose plugins libcni also loads from the
// directory <confdir>/<network name>/ (CNI 1.1): those come after the
// inline list, where doorman's entry would no longer be after the
// interface plugin.
func inlineOnly(path string, data []byte) error {
	var top struct {
		Name       string `json:"name"`
		InlineOnly any    `json:"loadOnlyInlinedPlugins"`
	}
	if err := json.Unmarshal(data, &top); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if b, ok := top.InlineOnly.(bool); ok && b {
		return nil
	}
	if s, ok := top.InlineOnly.(string); ok && strings.EqualFold(s, "true") {
		return nil
	}
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(path), top.Name, "*.conf"))
	if top.Name != "" && len(files) > 0 {
		return fmt.Errorf("%s: its network %q also loads plugins from %s: doorman cannot put its entry after those", path, top.Name, filepath.Join(filepath.Dir(path), top.Name))
	}
	return nil
}

// planConversion plans turning the single-plugin configuration at path
// (holding data) into a conflist with doorman's entry, keeping the original
// as a backup for Uninstall. The conflist is written before the original
// is removed, so that the node always has one of the two.
func (in *Installer) planConversion(path string, data []byte, became string) (*edit, error) {
	list := conflistName(path)
	if err := checkConversion(path, list); err != nil {
		return nil, err
	}
	converted, err := convertConf(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	out, err := withEntry(converted, in.config())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	old, err := os.ReadFile(list)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	backup := backupName(path)
	reason := fmt.Sprintf("%s has a single plugin: converted it to a conflist with doorman's entry (the original is kept as %s)", filepath.Base(path), filepath.Base(backup))
	if became != "" {
		reason += ": " + became
	}
	return &edit{
		Change: Change{list, "converted", reason},
		apply: func() error {
			if cur, err := os.ReadFile(backup); err != nil || !bytes.Equal(cur, data) {
				if err := writeChecked(backup, data, nilIfMissing(cur, err), path); err != nil {
					return fmt.Errorf("back up %s: %w", path, err)
				}
			}
			if !bytes.Equal(old, out) {
				if err := writeChecked(list, out, old, path); err != nil {
					return fmt.Errorf("write %s: %w", list, err)
				}
			}
			if err := removeChecked(path, data); err != nil {
				return fmt.Errorf("remove %s after converting it: %w", path, err)
			}
			return nil
		},
	}, nil
}

// nilIfMissing is the expected content of a file read with err: nil when
// it does not exist.
func nilIfMissing(data []byte, err error) []byte {
	if err != nil {
		return nil
	}
	if data == nil {
		return []byte{}
	}
	return data
}

// checkConversion refuses to convert path into list when list would not
// become the primary configuration, or would overwrite a file doorman did
// not write. A list already there is doorman's when the backup of path is
// (it converted path before, and path has come back or was not removed).
func checkConversion(path, list string) error {
	if _, err := os.Stat(list); err == nil {
		if _, err := os.Stat(backupName(path)); err != nil {
			return fmt.Errorf("converting %s to a conflist would overwrite %s, which doorman did not write: remove or rename one of them", path, list)
		}
	}
	if list < path {
		return nil
	}
	files, err := confFiles(filepath.Dir(path))
	if err != nil {
		return err
	}
	for _, f := range files {
		if f > path && f < list {
			return fmt.Errorf("converting %s to %s would make %s the first configuration: rename one of them", path, filepath.Base(list), f)
		}
	}
	return nil
}

// Uninstall removes doorman's entry from every network configuration in
// ConfDir and restores each single-plugin configuration it converted from
// its backup, byte for byte, as long as the conflist's other plugins are
// still those of the conversion. When they are not (the conflist was
// edited since), the conflist stays, without doorman's entry, and so does
// the backup, which the log names. The binary in BinDir stays unless
// removeBinary is set: pods enforced while doorman was installed need it
// for their DEL.
func (in *Installer) Uninstall(removeBinary bool) ([]Change, error) {
	var err error
	for try := 0; try < 5; try++ {
		var changes []Change
		changes, err = in.uninstall(false, removeBinary)
		if !errors.Is(err, errChanged) {
			return changes, err
		}
	}
	return nil, err
}

// CheckUninstalled reports whether Uninstall would change anything.
func (in *Installer) CheckUninstalled() error {
	changes, err := in.uninstall(true, false)
	if err != nil {
		return err
	}
	return pending(changes, "uninstalled")
}

func (in *Installer) uninstall(dry, removeBinary bool) ([]Change, error) {
	if !dry {
		lock, err := lockDir(in.ConfDir)
		if err != nil {
			return nil, err
		}
		defer lock.Close()
	}
	files, err := confFiles(in.ConfDir)
	if err != nil {
		return nil, err
	}
	var changes []Change
	var errs []error
	record := func(c Change) {
		changes = append(changes, c)
		if !dry {
			in.log(c)
		}
	}
	if !dry {
		in.removeLeftovers(record)
	}
	for _, f := range files {
		if !strings.HasSuffix(f, ".conflist") {
			continue
		}
		if err := in.uninstallFile(f, dry, record); err != nil {
			errs = append(errs, err)
		}
	}
	if removeBinary {
		dst := filepath.Join(in.BinDir, BinaryName)
		if _, err := os.Lstat(dst); err == nil {
			if !dry {
				if err := os.Remove(dst); err != nil {
					errs = append(errs, err)
				}
			}
			record(Change{dst, "removed", "asked to remove the binary"})
		}
	}
	return changes, errors.Join(errs...)
}

// uninstallFile removes doorman's entry from the conflist f, restoring the
// configuration it was converted from if there is one.
func (in *Installer) uninstallFile(f string, dry bool, record func(Change)) error {
	data, err := os.ReadFile(f)
	if err != nil {
		return err
	}
	if !hasEntry(data) {
		return nil
	}
	out, err := withoutEntry(data)
	if err != nil {
		return fmt.Errorf("%s: %w: left as it is", f, err)
	}
	stem := strings.TrimSuffix(f, ".conflist")
	for _, ext := range []string{".conf", ".json"} {
		orig := stem + ext
		backup := backupName(orig)
		saved, err := os.ReadFile(backup)
		if err != nil {
			continue
		}
		converted, err := convertConf(saved)
		if err != nil || !bytes.Equal(converted, out) {
			if !dry {
				if err := writeChecked(f, out, data, f); err != nil {
					return fmt.Errorf("write %s: %w", f, err)
				}
			}
			record(Change{f, "wrote", fmt.Sprintf("removed doorman's entry; its plugins changed since doorman converted %s, so it stays a conflist (the original is kept as %s)", filepath.Base(orig), backup)})
			return nil
		}
		cur, err := os.ReadFile(orig)
		if err == nil && !bytes.Equal(cur, saved) {
			return fmt.Errorf("cannot restore %s from %s: a different %s is there now: left both as they are", f, backup, orig)
		}
		if !dry {
			// The original first, then the conflist goes: the node
			// has a configuration throughout.
			if err := writeChecked(orig, saved, nilIfMissing(cur, err), backup); err != nil {
				return fmt.Errorf("restore %s: %w", orig, err)
			}
			if err := removeChecked(f, data); err != nil {
				return fmt.Errorf("remove %s after restoring %s: %w", f, orig, err)
			}
			if err := os.Remove(backup); err != nil {
				return err
			}
		}
		record(Change{orig, "restored", fmt.Sprintf("restored from %s and removed %s, which doorman had converted it to", filepath.Base(backup), filepath.Base(f))})
		return nil
	}
	if !dry {
		if err := writeChecked(f, out, data, f); err != nil {
			return fmt.Errorf("write %s: %w", f, err)
		}
	}
	record(Change{f, "wrote", "removed doorman's entry"})
	return nil
}
