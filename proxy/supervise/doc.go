// Package supervise keeps one sandbox's proxy running: a small parent
// process (`doorman supervise`) that holds the proxy's listening sockets
// and runs the proxy itself (`doorman proxy`) as its worker, starting a
// new one when the worker dies, whatever killed it (a crash, kill -9, the
// kernel's OOM killer at the proxy's memory limit).
//
// Why a parent per sandbox, not a daemon: the listening sockets are
// created inside the sandbox's network namespace and nothing outside it
// can make them again without changing the sandbox's ruleset. A parent
// that holds them hands the very same sockets to each worker, so the
// ruleset, the ports and the state never change; the worker it replaces
// gets the same config file, so the new one enforces the same policy file
// and appends to the same decision log. While no worker runs, connections
// wait in the listeners' backlog (and are then decided by the next
// worker) or are refused once it is full: the sandbox is closed, never
// open. One process per sandbox costs a few MiB, needs no socket, no
// registration and no daemon that must itself be supervised, and it goes
// with its sandbox.
//
// The parent joins the proxy's cgroup before it starts a worker, so every
// worker runs there from its first instruction, and it makes the worker
// the OOM killer's choice within the cgroup (a higher oom_score_adj), so
// that reaching the memory limit kills the worker, which is replaced, and
// not the parent.
//
// The parent says it is ready (on a pipe, to whoever started it) once the
// first worker serves, or, with ReadyOnStart, as soon as that worker has
// started: a CNI ADD then need not wait for the worker's own Go start and
// set-up, since the sandbox's ruleset already sends connections to the
// listeners, where they wait until it serves. What only the parent can
// see go wrong (the config, the listeners, the cgroup, starting a process)
// still comes before ready; a first worker that then does not serve is
// handled like any later one.
//
// A worker can also stop serving without dying: stopped (SIGSTOP),
// deadlocked, its relay loop wedged. It still runs and holds the
// listeners, so no exit ever tells, while every connection of its
// sandbox hangs. So the parent sends each serving worker a heartbeat on a
// socket pair (the worker's end inherited after the listeners, as
// DOORMAN_WORKER_FDS names it; see package launch), five per HeartbeatTimeout, which the worker sends
// back from its relay loop; a worker that leaves one unanswered for two
// heartbeats is said to be unresponsive (StateUnresponsive), and one that
// leaves it so for HeartbeatTimeout is killed (SIGKILL) and replaced like
// one that died.
//
// A worker that dies soon after it started is a failure in a row: the
// next one starts after a delay that doubles with each such failure (none
// for the first, so that one crash costs well under a second), and from
// CrashLoopAfter failures in a row the Status says the proxy is crash
// looping. A worker that serves for StableAfter resets the count.
//
// The parent records what it does in a status file (Status, JSON) in the
// sandbox's state directory, which the sandbox package reads: the worker
// serving now, how many were started after the first, how the last one
// ended. If the parent itself is killed, its worker serves on (it holds
// the listeners too) but is no longer replaced; the status then names a
// parent that is gone, which doorman reports. SIGTERM stops the worker
// (SIGTERM, then SIGKILL after the drain timeout) and then the parent.
package supervise
