// Package launch is the contract between a sandbox and the processes of its
// proxy, in one place: how the sandbox package starts them, what each one
// inherits, and how each says it is ready.
//
// A sandbox's proxy is two processes of the doorman binary. Start (called
// by package sandbox) starts the supervisor, `doorman supervise` (package
// supervise), detached, with the proxy's listening sockets; the supervisor
// starts the worker, `doorman proxy` (package daemon), and starts another
// whenever one dies. Each side of each hand-over is here:
//
//	sandbox ── Start ──▶ doorman supervise ── Worker.Command ──▶ doorman proxy
//	                     Supervised(args)                       InheritWorker(args)
//
// What is handed over:
//
//   - The config file (Config, JSON, written by the sandbox, read by both
//     processes): every setting of the proxy, the sandbox's spec.Proxy
//     among them. `doorman proxy` takes it and nothing else: no setting is
//     a flag.
//   - The descriptors. Both processes inherit the listeners as 3, 4, ...
//     in the order the config's listeners name them (tcp, then dnsUDP,
//     then dnsTCP); the supervisor holds them all along, so that every
//     worker gets the very same sockets. After them the supervisor gets
//     its readiness pipe (--ready-fd), and each worker its heartbeat
//     socket, then its readiness pipe, which its environment names
//     (EnvWorkerFDs: DOORMAN_WORKER_FDS="HEARTBEAT READY").
//   - Readiness: a process writes "ready\n" to its pipe and closes it
//     (Ready); the one that started it reads that line (AwaitReady). A
//     worker is ready once it serves; a supervisor once its first worker
//     serves or, with ReadyOnStart, once that worker has started.
//   - The heartbeat: a SOCK_SEQPACKET socket on which the worker sends
//     back each message its supervisor sends (see package supervise).
//
// The command lines carry the sandbox's id (--sandbox) so that ps shows
// whose proxy a process is; each side checks it against the config's. A
// supervisor starts its workers from /proc/self/exe, its own binary even
// once an upgrade has replaced the file, so the contract between a
// supervisor and its workers is always one release's; the one between a
// sandbox and the supervisor it starts (these flags, the config's keys) is
// kept as earlier releases spelled it.
package launch
