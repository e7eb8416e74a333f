// Package runner runs one command in a fresh network namespace wired through
// doorman's CNI chain — loopback, then bridge with host-local IPAM, then the
// doorman plugin — with no container engine at all. It is what `doorman run`
// is made of.
//
// It exists so that a person can sandbox a single process ("this build may
// reach the package mirror and nothing else") with the very enforcement a
// container gets: the same conflist keys, the same reference plugins, the
// same doorman plugin binary, driven through libcni exactly as a runtime
// drives them. Nothing here enforces anything itself.
//
// Run is a whole `doorman run`: Attach, Start, Wait with the signals a
// shell would forward passed on, Detach, and the exit status. It takes a
// Config whose settings are typed (the caller parsed its flags once); the
// doorman entry of the conflist it writes is the plugin's to parse, as a
// runtime's would be.
//
// A run goes:
//
//  1. Attach: take the run directory's lock; reap runs whose `doorman run`
//     process died without cleaning up; create a named network namespace
//     (/run/netns/doorman-<id>); ADD the loopback network and the
//     bridge+doorman conflist; masquerade the run subnet out of the host
//     (an nftables table of its own, made over netlink: no iptables or nft
//     binary is needed), so that DNS and ICMP reach the world.
//  2. Start: on a locked OS thread, enter the namespace, unshare a mount
//     namespace, bind-mount a generated resolv.conf (the resolvers doorman
//     allows) over /etc/resolv.conf, cover doorman's own directories and
//     secret files and replace /dev (see Start), and fork from that thread
//     the run's init (Init: this binary again) as the first process of a
//     new pid namespace; the init mounts that namespace's /proc, limits
//     the capability bounding set and starts the command. The init, and
//     with it the command, gets SIGKILL if that thread (this process) dies.
//  3. Wait, then Detach: kill whatever the command left running in the
//     namespace, DEL both networks (the doorman plugin stops the proxy and
//     removes its state), remove the namespace and the run's files, and,
//     when no other run uses them, the bridge, the masquerade table and
//     the IPAM data.
//
// Every run is recorded under the run directory before its namespace
// exists, so a run whose process was killed (SIGKILL, a crash) is torn down
// by the next Attach that sees its process gone.
package runner
