package launch

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// EnvWorkerFDs names, in a worker's environment, the descriptors it
// inherits after its listeners: "HEARTBEAT READY", in decimal.
const EnvWorkerFDs = "DOORMAN_WORKER_FDS"

// Worker is how a supervisor starts each of its workers.
type Worker struct {
	// Path is the doorman binary: /proc/self/exe, the supervisor's own,
	// even once an upgrade has replaced the file it was started from.
	Path string
	// Sandbox and ConfigFile are the supervisor's (see Supervised).
	Sandbox, ConfigFile string
	// Env is the worker's environment (the supervisor's own).
	Env []string
	// Listeners are the listeners the supervisor holds.
	Listeners []*os.File
	// Stderr receives the worker's standard error.
	Stderr *os.File
}

// Command is the command of one worker: `doorman proxy --sandbox ID
// --config FILE` (named as the supervisor was), inheriting the listeners
// as 3, 4, ..., then heartbeat, then ready, which its environment names.
func (w Worker) Command(heartbeat, ready *os.File) *exec.Cmd {
	extra := append(append([]*os.File(nil), w.Listeners...), heartbeat, ready)
	env := append(append([]string(nil), w.Env...),
		fmt.Sprintf("%s=%d %d", EnvWorkerFDs, 1+len(extra), 2+len(extra)))
	return &exec.Cmd{
		Path:       w.Path,
		Args:       []string{os.Args[0], "proxy", "--sandbox", w.Sandbox, "--config", w.ConfigFile},
		Env:        env,
		Stderr:     w.Stderr,
		ExtraFiles: extra,
	}
}

// Inherited is what a worker inherited from its supervisor.
type Inherited struct {
	// Config is the proxy's config, read and checked, from ConfigFile.
	Config     Config
	ConfigFile string
	// Ready says ready to the supervisor; nil for a proxy run by hand.
	Ready func()
	// Heartbeat is the descriptor of the supervisor's heartbeats, to be
	// answered; -1 for a proxy run by hand.
	Heartbeat int
}

// InheritWorker reads a worker's command line (`doorman proxy --config
// FILE [--sandbox ID]`, args without the verb: the config file holds every
// setting), loads the config and takes the heartbeat socket and readiness
// pipe its environment names (none for a proxy run by hand). A --sandbox
// must name the file's sandbox. A command line that does not parse is
// ErrUsage, its usage printed to usage.
func InheritWorker(args []string, usage io.Writer) (*Inherited, error) {
	fs := flag.NewFlagSet("doorman proxy", flag.ContinueOnError)
	fs.SetOutput(usage)
	var config, sandbox string
	fs.StringVar(&config, "config", "", "config `file` (JSON) of every setting, as a sandbox writes it (required)")
	fs.StringVar(&sandbox, "sandbox", "", "sandbox id: must be the config's (it is there so that ps shows whose proxy this is)")
	fs.Usage = func() {
		fmt.Fprintln(usage, "usage: doorman proxy --config FILE [--sandbox ID]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, ErrUsage
	}
	if config == "" || fs.NArg() != 0 {
		fs.Usage()
		return nil, ErrUsage
	}
	cfg, err := loadFor(config, sandbox)
	if err != nil {
		return nil, err
	}
	in := &Inherited{Config: cfg, ConfigFile: config, Heartbeat: -1}
	v, ok := os.LookupEnv(EnvWorkerFDs)
	if !ok {
		return in, nil
	}
	os.Unsetenv(EnvWorkerFDs)
	hb, ready, err := workerFDs(v, len(cfg.Listeners.fds()))
	if err != nil {
		return nil, err
	}
	in.Heartbeat, in.Ready = hb, readySignal(ready)
	return in, nil
}

// workerFDs parses the value of EnvWorkerFDs of a worker with n inherited
// listeners: the heartbeat socket and the readiness pipe follow them.
func workerFDs(v string, n int) (heartbeat, ready int, err error) {
	f := strings.Fields(v)
	if len(f) == 2 {
		heartbeat, err = strconv.Atoi(f[0])
		if err == nil {
			ready, err = strconv.Atoi(f[1])
		}
	}
	if len(f) != 2 || err != nil || heartbeat != 3+n || ready != 4+n {
		return -1, -1, fmt.Errorf("%s=%q: want the heartbeat socket and the readiness pipe after the %d listeners, \"%d %d\"", EnvWorkerFDs, v, n, 3+n, 4+n)
	}
	return heartbeat, ready, nil
}
