package runner

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/doorman-net/doorman/hostconf"
	"github.com/doorman-net/doorman/sandbox"
)

// cover is one path the command's view leaves out: a directory is covered
// by an empty read-only tmpfs, a file by /dev/null, read-only.
type cover struct {
	path string // resolved: no symbolic link in it
	dir  bool
	// keep are files below a directory cover that stay visible at their
	// own paths (the run's trust bundle, inside the CA directory).
	keep []string
}

// hiddenDirs are the directories of doorman's own a run's command must
// not see, whatever the run was configured with: those of this run and
// the defaults, which the host's other front doors (a CNI network, the
// hook) use. Each holds something a sandbox must not have: the networks'
// CA keys, the sandboxes' state (live policy files a command could edit,
// proxy configs with OTLP headers), the decision logs of every sandbox,
// the runs' records and CNI caches, and /etc/doorman (limits, otlp.json
// with its headers, default policies and, by convention, secret files).
func (s *Sandbox) hiddenDirs() []string {
	return []string{
		s.caRoot, hostconf.DefaultCADir,
		s.stateDir, hostconf.DefaultStateDir,
		s.logDir, hostconf.DefaultLogDir,
		s.runDir, DefaultRunDir,
		hostconf.ConfigDir,
	}
}

// secretFiles are the secret files of credential injection that doorman
// knows of when the command starts: those of the run's own policy and of
// every live sandbox's in the state directories (the run's and the
// default). A policy that cannot be read adds none.
func (s *Sandbox) secretFiles() []string {
	files := slices.Clone(s.secrets)
	for _, dir := range []string{s.stateDir, hostconf.DefaultStateDir} {
		states, _ := sandbox.List(dir)
		for _, st := range states {
			if p, err := st.Policy(); err == nil {
				files = append(files, p.SecretFiles()...)
			}
		}
	}
	return files
}

// resolveCovers turns the directories and files to hide into covers:
// each path resolved (a missing one has nothing to hide and is left out),
// kept once, and left out when a directory cover above it hides it
// already. keep are files that must stay visible; each is attached to the
// directory cover it is below. Covering the root directory is refused.
func resolveCovers(dirs, files, keep []string) ([]cover, error) {
	var all []cover
	add := func(p string) error {
		if p == "" {
			return nil
		}
		if !filepath.IsAbs(p) {
			return fmt.Errorf("hide %q from the command: not an absolute path", p)
		}
		real, err := filepath.EvalSymlinks(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("hide %s from the command: %w", p, err)
		}
		fi, err := os.Stat(real)
		if err != nil {
			return fmt.Errorf("hide %s from the command: %w", p, err)
		}
		if real == "/" {
			return fmt.Errorf("hide %s from the command: it is the root directory; give doorman directories of their own", p)
		}
		all = append(all, cover{path: real, dir: fi.IsDir()})
		return nil
	}
	for _, p := range slices.Concat(dirs, files) {
		if err := add(p); err != nil {
			return nil, err
		}
	}
	// Shortest first, so that a directory comes before what is below it.
	slices.SortFunc(all, func(a, b cover) int {
		return cmp.Or(cmp.Compare(len(a.path), len(b.path)), strings.Compare(a.path, b.path))
	})
	var out []cover
	for _, c := range all {
		if slices.ContainsFunc(out, func(o cover) bool { return o.path == c.path || (o.dir && below(c.path, o.path)) }) {
			continue
		}
		out = append(out, c)
	}
	for _, k := range keep {
		real, err := filepath.EvalSymlinks(k)
		if err != nil {
			return nil, fmt.Errorf("keep %s visible to the command: %w", k, err)
		}
		for i := range out {
			if out[i].dir && below(real, out[i].path) {
				out[i].keep = append(out[i].keep, real)
				break
			}
		}
	}
	return out, nil
}

// below reports whether path is strictly below dir.
func below(path, dir string) bool {
	return strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// mountCovers mounts the covers in the calling thread's mount namespace,
// which must be the command's own (enterSandbox's): an empty read-only
// tmpfs over each directory (with its kept files bound back in place,
// read-only) and /dev/null, read-only, over each file.
func mountCovers(covers []cover) error {
	for _, c := range covers {
		var err error
		if c.dir {
			err = coverDir(c.path, c.keep)
		} else {
			err = bindReadOnly("/dev/null", c.path)
		}
		if err != nil {
			return fmt.Errorf("hide %s from the command: %w", c.path, err)
		}
	}
	return nil
}

// coverDir mounts an empty tmpfs over dir, binds each of keep (files below
// dir, as the host has them) back at its own path, and makes the tmpfs
// read-only.
func coverDir(dir string, keep []string) error {
	return tmpfsOver(dir, keep, "mode=0755,size=64k", true)
}

// tmpfsOver mounts a tmpfs with options over dir, binds each of keep
// (files below dir, as the host has them) back at its own path,
// read-only, and, if readOnly, makes the tmpfs read-only.
func tmpfsOver(dir string, keep []string, options string, readOnly bool) error {
	// The kept files are opened before the tmpfs hides them.
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for _, k := range keep {
		fd, err := unix.Open(k, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("open %s to keep it visible: %w", k, err)
		}
		fds = append(fds, fd)
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, options); err != nil {
		return fmt.Errorf("mount a tmpfs over it: %w", err)
	}
	for i, k := range keep {
		if err := os.MkdirAll(filepath.Dir(k), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(k, nil, 0o644); err != nil {
			return err
		}
		if err := bindReadOnly(fdPath(fds[i]), k); err != nil {
			return err
		}
	}
	if !readOnly {
		return nil
	}
	if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
		return fmt.Errorf("make its tmpfs read-only: %w", err)
	}
	return nil
}

// bindReadOnly bind-mounts src over dst and makes that mount read-only.
func bindReadOnly(src, dst string) error {
	if err := unix.Mount(src, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s over %s: %w", src, dst, err)
	}
	if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("make %s read-only: %w", dst, err)
	}
	return nil
}

// fdPath names an open file descriptor of this process (an O_PATH one
// included): a mount's source that no later mount can hide.
func fdPath(fd int) string { return fmt.Sprintf("/proc/self/fd/%d", fd) }

// runDirs are the directories where the host's daemons keep their
// control sockets (dockerd, containerd, Podman, CRI-O, systemd, D-Bus):
// a command that reaches one of them acts in the host's network
// namespace (a `docker run --network host`, a transient systemd unit),
// outside the sandbox. The network namespace does not scope filesystem
// sockets, so the command gets an empty /run of its own instead.
var runDirs = []string{"/run", "/var/run"}

// mountRun mounts, in the calling thread's mount namespace (the
// command's own), an empty writable tmpfs over each of runDirs that is a
// directory of its own (on most hosts /var/run is a link to /run), and
// binds each of keep that is below it back at its own path, read-only.
func mountRun(keep []string) error {
	seen := map[string]bool{}
	for _, d := range runDirs {
		real, err := filepath.EvalSymlinks(d)
		if errors.Is(err, os.ErrNotExist) || seen[real] {
			continue
		}
		if err != nil {
			return fmt.Errorf("give the command a /run of its own: %w", err)
		}
		seen[real] = true
		var under []string
		for _, k := range keep {
			if rk, err := filepath.EvalSymlinks(k); err == nil && below(rk, real) {
				under = append(under, rk)
			}
		}
		if err := tmpfsOver(real, under, "mode=0755,size=16m", false); err != nil {
			return fmt.Errorf("give the command a %s of its own: %w", real, err)
		}
	}
	return nil
}

// devNodes are the device nodes of the command's /dev: the ones every
// program may open, as in a container. No disk, memory or other hardware
// device is among them.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// mountDev replaces /dev, in the calling thread's mount namespace (the
// command's own), by a read-only tmpfs holding devNodes (bound from the
// host's /dev), a devpts instance of its own for pseudo-terminals, a
// tmpfs /dev/shm and the usual links into /proc/self. Without it, a root
// command could read the host's disks through their device nodes, and so
// every file the covers hide.
func mountDev() error {
	var fds []int
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	var nodes []string
	for _, n := range devNodes {
		fd, err := unix.Open("/dev/"+n, unix.O_PATH|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return fmt.Errorf("open /dev/%s: %w", n, err)
		}
		fds, nodes = append(fds, fd), append(nodes, n)
	}
	const flags = unix.MS_NOSUID | unix.MS_NOEXEC
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", flags, "mode=0755,size=64k"); err != nil {
		return fmt.Errorf("mount a tmpfs over /dev: %w", err)
	}
	for i, n := range nodes {
		p := "/dev/" + n
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount(fdPath(fds[i]), p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind the host's %s: %w", p, err)
		}
	}
	for _, d := range []string{"/dev/pts", "/dev/shm"} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", "/dev/pts", "devpts", flags, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mount a devpts instance on /dev/pts: %w", err)
	}
	if err := unix.Mount("shm", "/dev/shm", "tmpfs", flags|unix.MS_NODEV, "mode=1777"); err != nil {
		return fmt.Errorf("mount a tmpfs on /dev/shm: %w", err)
	}
	for link, target := range map[string]string{
		"/dev/ptmx": "pts/ptmx", "/dev/fd": "/proc/self/fd",
		"/dev/stdin": "/proc/self/fd/0", "/dev/stdout": "/proc/self/fd/1", "/dev/stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, link); err != nil {
			return err
		}
	}
	if err := unix.Mount("", "/dev", "", unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
		return fmt.Errorf("make /dev read-only: %w", err)
	}
	return nil
}
