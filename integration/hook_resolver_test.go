package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/doorman-net/doorman/hook"
)

// withoutHooks leaves doorman's hooks out of the spec: the runc wrapper
// adds them, with the flags its runtime.json says.
func withoutHooks() specOption {
	return func(s *specs.Spec) { s.Hooks = nil }
}

// wrapped runs `doorman runtime` (the runc wrapper, configured by cfg as
// its runtime.json) with runc's args in the host namespace, as dockerd
// runs it.
func (r *runcEnv) wrapped(cfg map[string]any, args ...string) runcResult {
	r.t.Helper()
	path := filepath.Join(r.dir, "runtime.json")
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		r.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	script := "set -e\n" + r.mounts + "exec \"$@\"\n"
	full := slices.Concat([]string{"wrapper-session", doormanBin(), "runtime", "--root", r.runcRoot}, args)
	cmd := r.net.HostCommand(ctx, "sh", slices.Concat([]string{"-c", script}, full)...)
	cmd.Env = append(cmd.Env, "DOORMAN_RUNTIME_CONFIG="+path)
	stdout, stderr := r.outputFile(), r.outputFile()
	defer stdout.Close()
	defer stderr.Close()
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	res := runcResult{args: args, stdout: readAll(stdout), stderr: readAll(stderr)}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		res.exit = ee.ExitCode()
	default:
		r.t.Fatalf("doorman runtime %s: %v (stderr %q)", strings.Join(args, " "), err, res.stderr)
	}
	return res
}

// withoutHookFlag drops every doorman hook argument starting with prefix
// (an operator's config.json without that flag).
func withoutHookFlag(prefix string) specOption {
	return func(s *specs.Spec) {
		for _, hooks := range [][]specs.Hook{s.Hooks.CreateRuntime, s.Hooks.Prestart, s.Hooks.Poststop} {
			for i := range hooks {
				hooks[i].Args = slices.DeleteFunc(slices.Clone(hooks[i].Args), func(a string) bool { return strings.HasPrefix(a, prefix) })
			}
		}
	}
}

// TestHookRuncUpstreamResolver: the runc wrapper's runtime.json and the
// hook's --upstream-resolver take a bare address (IPv4 or IPv6) as the
// conflist key does, and containers start with the proxy resolving through
// it; a value that is no address refuses the container with a message
// naming where it came from, the value and why. Without either the proxy
// resolves through the container's own resolvers, not the resolv.conf of
// the namespace runc and the hook run in.
func TestHookRuncUpstreamResolver(t *testing.T) {
	e := newRuncEnv(t)
	runc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	runtimeJSON := func(upstream string) map[string]any {
		return map[string]any{"runc": runc, "stateDir": e.stateDir, "logDir": e.logDir,
			"defaultPolicy": e.defaultPolicyFile(), "upstreamResolver": upstream}
	}
	// Helpers of the subtest's own t: runDetached and delete fail the
	// parent.
	run := func(t *testing.T, c *runcContainer) {
		t.Helper()
		if r := e.runc("run", "--detach", "--bundle", c.bundle, c.id); r.exit != 0 {
			t.Fatalf("runc run: %v", r)
		}
	}
	remove := func(t *testing.T, c *runcContainer) {
		t.Helper()
		if r := e.runc("delete", "--force", c.id); r.exit != 0 {
			t.Errorf("runc delete: %v", r)
		}
		e.assertNoSandbox(c)
	}
	get := func(t *testing.T, c *runcContainer, name string) {
		t.Helper()
		if r := e.exec(c, "/probe", "get", "https://"+name+"/", "--ca", "/ca.pem"); r.exit != 0 || !strings.HasPrefix(r.stdout, "status: 200\n"+name+" ") {
			t.Errorf("allowed HTTPS to %s: %v", name, r)
		}
	}

	t.Run("runtime.json, a bare address", func(t *testing.T) {
		c := e.newContainer("rtjson", withNetNS(e.net.NewSandbox(t).Path()), allowAPI(), withoutHooks())
		if r := e.wrapped(runtimeJSON(e.net.DNS.String()), "run", "--detach", "--bundle", c.bundle, c.id); r.exit != 0 {
			t.Fatalf("doorman runtime run: %v", r)
		}
		if s, want := e.state(c), addrPortsOf(e.net.DNS); !slices.Equal(s.ProxyResolvers, want) {
			t.Errorf("proxy resolvers %v, want %v", s.ProxyResolvers, want)
		}
		get(t, c, apiName)
		remove(t, c)
	})

	t.Run("--upstream-resolver, a bare IPv6 address", func(t *testing.T) {
		c := e.newContainer("flag", withNetNS(e.net.NewSandbox(t).Path()), allowAPI(), withHookFlags("--upstream-resolver="+e.net.DNS6.String()))
		run(t, c)
		if s, want := e.state(c), addrPortsOf(e.net.DNS6); !slices.Equal(s.ProxyResolvers, want) {
			t.Errorf("proxy resolvers %v, want %v", s.ProxyResolvers, want)
		}
		get(t, c, apiName)
		remove(t, c)
	})

	const want = "; want addr or addr:port, such as 203.0.113.53, 203.0.113.53:5353, 2001:db8::53 or [2001:db8::53]:5353"
	t.Run("runtime.json, no address", func(t *testing.T) {
		c := e.newContainer("rtbad", withNetNS(e.net.NewSandbox(t).Path()), allowAPI(), withoutHooks())
		r := e.wrapped(runtimeJSON("dns.example"), "run", "--detach", "--bundle", c.bundle, c.id)
		msg := "runtime config " + filepath.Join(e.dir, "runtime.json") + `: upstreamResolver "dns.example": not an IP address (name the server by its address)` + want
		if r.exit == 0 || !strings.Contains(r.stderr, msg) {
			t.Errorf("doorman runtime run with a bad upstreamResolver: %v\nwant an error saying %s", r, msg)
		}
		if e.exists(c) {
			t.Error("runc created the container")
		}
		e.assertNoSandbox(c)
	})

	t.Run("--upstream-resolver, no address", func(t *testing.T) {
		c := e.newContainer("flagbad", withNetNS(e.net.NewSandbox(t).Path()), allowAPI(), withHookFlags("--upstream-resolver=dns.example:53"))
		r := e.runc("run", "--detach", "--bundle", c.bundle, c.id)
		msg := `doorman: container ` + c.id + ` not started: --upstream-resolver "dns.example:53": "dns.example" is not an IP address (name the server by its address)` + want
		// runc quotes the hook's output in its own error.
		if r.exit == 0 || !strings.Contains(strings.ReplaceAll(r.stderr, `\"`, `"`), msg) {
			t.Errorf("runc run with a bad --upstream-resolver: %v\nwant an error saying %s", r, msg)
		}
		e.assertNoSandbox(c)
	})

	// No upstreamResolver, and the resolv.conf of runc's namespace names
	// the rogue server, which does not know the allowed name: the proxy
	// asks the resolvers of the container's own resolv.conf.
	t.Run("none: the container's resolvers", func(t *testing.T) {
		e.net.AddHost(splitName, splitAddr4, splitAddr6)
		e.net.AnswerOnlyAt(splitName, e.net.DNS, e.net.DNS6)
		writeResolvConf(t, e.net.HostNS(), e.net.RogueDNS)
		c := e.newContainer("none", withNetNS(e.net.NewSandbox(t).Path()), withoutHookFlag("--upstream-resolver"),
			withAnnotations(hook.AnnotationMode, "allowlist", hook.AnnotationAllowedHosts, splitName))
		run(t, c)
		if s, want := e.state(c), addrPortsOf(e.net.DNS, e.net.DNS6); !slices.Equal(s.ProxyResolvers, want) {
			t.Errorf("proxy resolvers %v, want the rootfs resolv.conf's %v", s.ProxyResolvers, want)
		}
		get(t, c, splitName)
		if n := e.net.QueriesAt(e.net.RogueDNS, splitName); n != 0 {
			t.Errorf("the rogue server (runc's resolv.conf) was asked for %s %d times", splitName, n)
		}
		remove(t, c)
	})
}
