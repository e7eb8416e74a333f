package hook

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/doorman-net/doorman/ca"
)

// runc exec flags that take a value, by name.
var runcExecValueFlags = []string{
	"console-socket", "cwd", "env", "e", "user", "u", "additional-gids", "g", "process", "p",
	"apparmor", "process-label", "pid-file", "preserve-fds", "cap", "c", "cgroup",
}

// defaultRuncRoot is where runc keeps container state without --root.
const defaultRuncRoot = "/run/runc"

// prepareExec gives a process that `runc exec --process FILE` starts in a
// container the DOORMAN_* variables the container's own process got at
// create, and the trust bundle's variables (SSL_CERT_FILE and the like,
// see addTrust) when its policy inspects hosts: a client run with `docker
// exec` must trust the network's CA as the container's own process does. Engines build an exec'd process's environment from their own
// record of the container (`docker exec` from the image and `docker run
// -e`), not from config.json, so without this `docker exec env` would not
// show them. It is best effort: the variables are information, and a
// container whose bundle cannot be found still execs, unchanged.
func prepareExec(global, args []string) {
	process, id := parseExec(args)
	if process == "" || id == "" || filepath.Base(id) != id {
		return
	}
	root := globalFlag(global, "root")
	if root == "" {
		root = defaultRuncRoot
	}
	env := doormanEnv(root, id)
	if len(env) == 0 {
		return
	}
	data, err := os.ReadFile(process)
	if err != nil {
		return
	}
	var proc map[string]any
	if json.Unmarshal(data, &proc) != nil {
		return
	}
	wrapped := map[string]any{"process": proc} // the shape setEnv edits
	for _, k := range execEnvKeys() {
		if v, ok := env[k]; ok {
			setEnv(wrapped, k, v)
		}
	}
	if out, err := json.Marshal(proc); err == nil {
		writeFileKeepMode(process, out)
	}
}

// parseExec finds the --process file and the container id (the first
// positional argument) of runc exec.
func parseExec(args []string) (process, id string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			if i+1 < len(args) && id == "" {
				id = args[i+1]
			}
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if id == "" {
				id = a
			}
			continue
		}
		name, v, hasValue := flagName(a)
		if !hasValue && slices.Contains(runcExecValueFlags, name) && i+1 < len(args) {
			i++
			v = args[i]
		}
		if name == "process" || name == "p" {
			process = v
		}
	}
	return process, id
}

// execEnvKeys are the variables prepareExec carries over.
func execEnvKeys() []string { return append([]string{EnvNetworkMode, EnvEnforcement}, ca.BundleEnv...) }

// doormanEnv returns the variables doorman set for container id's own
// process (DOORMAN_*, and the trust bundle's where they name it), from its
// bundle's config.json, which runc's state (root/id/state.json) names in
// the label "bundle=PATH".
func doormanEnv(root, id string) map[string]string {
	data, err := os.ReadFile(filepath.Join(root, id, "state.json"))
	if err != nil {
		return nil
	}
	var st struct {
		Config struct {
			Labels []string `json:"labels"`
		} `json:"config"`
	}
	if json.Unmarshal(data, &st) != nil {
		return nil
	}
	bundle := ""
	for _, l := range st.Config.Labels {
		if v, ok := strings.CutPrefix(l, "bundle="); ok {
			bundle = v
		}
	}
	if bundle == "" {
		return nil
	}
	spec, err := loadSpec(bundle)
	if err != nil || spec.Process == nil {
		return nil
	}
	env := map[string]string{}
	for _, kv := range spec.Process.Env {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case !ok:
		case k == EnvNetworkMode || k == EnvEnforcement:
			env[k] = v
		case slices.Contains(ca.BundleEnv, k) && v == trustedBundlePath:
			env[k] = v
		}
	}
	return env
}
