package runner

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/invoke"
)

// requiredPlugins are the CNI plugins a run calls, in order.
var requiredPlugins = []string{"loopback", "bridge", "host-local", "doorman"}

// SearchPath is where a run looks for its CNI plugins when not told: the
// directory of the doorman binary exe (where `make build` puts them), then
// ../lib/doorman/cni beside it (where `make install` puts them, e.g.
// /usr/local/lib/doorman/cni for /usr/local/bin/doorman), then the usual
// CNI directories /opt/cni/bin and /usr/lib/cni.
func SearchPath(exe string) []string {
	dir := filepath.Dir(exe)
	return []string{
		dir,
		filepath.Join(filepath.Dir(dir), "lib", "doorman", "cni"),
		"/opt/cni/bin",
		"/usr/lib/cni",
	}
}

// FindPlugins returns where each plugin a run needs is found in dirs (the
// first match, as libcni picks it), or an error naming every missing one.
func FindPlugins(dirs []string) (map[string]string, error) {
	found := map[string]string{}
	var missing []string
	for _, p := range requiredPlugins {
		path, err := invoke.FindInPath(p, dirs)
		if err != nil {
			missing = append(missing, p)
			continue
		}
		found[p] = path
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("CNI plugin(s) %s not found in %s: build them with `make build` (they go next to bin/doorman), install them with `make install`, or name their directory with --cni-path",
			strings.Join(missing, ", "), strings.Join(dirs, ":"))
	}
	return found, nil
}
