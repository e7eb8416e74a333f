package hook

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"
)

// logRuntimeError appends err to the log runc was told to write with its
// global --log flag, in the --log-format asked for (json or text). Engines
// read their runtime's errors from there: containerd's shim reports the
// last "error" line of <bundle>/log.json as the reason `docker run` failed,
// and never the runtime's stderr, so without this line the user would see
// only "exit status 1". Without --log it does nothing.
func logRuntimeError(args []string, err error) {
	path, format := runtimeLog(args)
	if path == "" {
		return
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	var line []byte
	if format == "json" {
		line, _ = json.Marshal(struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Time  string `json:"time"`
		}{"error", err.Error(), now})
	} else {
		line = fmt.Appendf(nil, "time=%q level=error msg=%q", now, err.Error())
	}
	f, ferr := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if ferr != nil {
		return
	}
	defer f.Close()
	f.Write(append(line, '\n'))
}

// runtimeLog returns the values of runc's global --log and --log-format
// flags.
func runtimeLog(args []string) (path, format string) {
	return globalFlag(args, "log"), globalFlag(args, "log-format")
}

// globalFlag returns the value of runc's global flag name (given before
// the command, as --name V, --name=V, -name V or -name=V), or "".
func globalFlag(args []string, name string) string {
	value := ""
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			break
		}
		n, v, hasValue := flagName(a)
		if !hasValue && slices.Contains(runcGlobalValueFlags, n) && i+1 < len(args) {
			i++
			v = args[i]
		}
		if n == name {
			value = v
		}
	}
	return value
}
