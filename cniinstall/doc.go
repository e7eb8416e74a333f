// Package cniinstall keeps doorman chained into a node's primary CNI network
// configuration.
//
// On a Kubernetes node the container runtime, not doorman, decides which
// network a pod joins: containerd's CRI plugin and CRI-O load the network
// configuration files in the CNI conf dir (/etc/cni/net.d) with libcni and
// use the lexicographically first one. That file belongs to the cluster's
// primary CNI (kindnet, flannel, Calico, Cilium, a cloud CNI), which writes
// it when its agent starts and rewrites or replaces it when it restarts.
// doorman does not replace that network; it joins it, the way istio-cni and
// Cilium's chaining mode do: an Installer appends one doorman entry to the
// plugin list of that file, and keeps it there.
//
// # Which file
//
// The primary configuration is found as the runtimes find it (Primary):
// libcni.ConfFiles(dir, .conf, .conflist, .json), sorted, and the first
// one that loads (a .conflist with libcni.ConfListFromFile and at least one
// plugin, a .conf or .json with libcni.ConfFromFile and a type). CRI-O
// skips a file that does not load and takes the next one. containerd's CRI
// (through go-cni's WithDefaultConf, which loads at most one file) does
// not: an invalid first file fails its whole load, the node's network is
// not ready and no pod sandbox starts. Skipping is therefore right for
// both: under CRI-O the next valid file is the one pods get, and under
// containerd no pod starts on the invalid file, while the entry waits in
// the next one. When the invalid file becomes valid it becomes the primary,
// and a watching Installer puts the entry there.
//
// doorman's own files are named so that no runtime loads them: temporary
// files are ".<name>.doorman-tmp-<n>" and the backup of a converted .conf
// is "<name>.doorman-backup". libcni matches extensions only (a leading
// dot hides nothing from it), and neither extension is one it reads.
//
// # What is written, and how
//
// A single-plugin .conf or .json is first turned into a .conflist of the
// same stem (10-bridge.conf becomes 10-bridge.conflist, with the .conf's
// cniVersion and name and the .conf itself as the first plugin: what
// libcni.ConfListFromConf makes of it in memory). The new file is written
// before the old one is removed, and the .conf is kept byte for byte as a
// backup for Uninstall. The conversion is refused when another
// configuration file would sort between the two names, since the new file
// would then not be the first.
//
// The doorman entry (Config.Entry) declares the capabilities
// io.kubernetes.cri.pod-annotations, dns and cgroupPath, so that the
// runtime passes the pod's annotations, its DNS settings and its cgroup in
// runtimeConfig, and carries the node's defaults from the installer's
// Config. The file is edited as bytes, not re-encoded: the entry is
// spliced after the last plugin in the style (indentation, one line or
// many) of the plugins around it, an existing doorman entry is replaced
// where it stands, and every other byte of the file stays as it was. So
// a second run changes no byte, no plugin's unknown keys or key order are
// lost, and Uninstall of a conflist restores it byte for byte.
//
// Every write is a temporary file in the same directory, synced, swapped
// with the target, and the directory synced: a runtime that reads the file
// sees the old content or the new, never a part, and a crash leaves one of
// the two. The swap is a compare-and-swap (renameat2 RENAME_EXCHANGE, then
// a look at what was swapped out): if another writer (the primary CNI)
// changed the file since doorman read it, the two are swapped back and the
// pass is made again on the new content, so doorman never puts back an
// older version of another writer's file. Installers on one node are
// serialized by a lock on the conf dir, and each pass removes the
// temporary files an interrupted one left.
//
// # Watching, and stopping
//
// Watch keeps the entry in place: it watches the conf dir with inotify
// and, after a burst of events settles (Debounce, at most MaxDelay after
// the first), makes another pass, which puts the entry back when the
// primary CNI rewrote or replaced its file or when another file became
// the primary. It logs one line for each thing it changes, naming the
// file and why. Cancelling Watch (SIGTERM, SIGINT) leaves the entry in
// place: a DaemonSet restart must not open a window in which pods start
// without doorman in their chain (istio-cni once removed its entry on
// shutdown, and pods started unenforced while it was gone).
//
// The loop that reacts reads its events from a small interface (an
// fsnotify watch of the conf dir on the host) and makes its passes through
// a function (Install), so that its reactions (debounce, the bound on a
// burst, passes made again after a lost race, overflows, the ends of the
// watch) are unit tested with fakes. Everything else the Installer does is
// on files in ConfDir and BinDir, which its tests point at a temporary
// directory: none of it needs root.
//
// Uninstall is the explicit way out: it removes doorman's entry from
// every configuration file in the dir and restores a converted .conf from
// its backup, as long as the conflist's other plugins are still those
// the conversion made.
package cniinstall
