// Package agentclient is how the CNI plugin gets a pod's policy from the
// doorman node agent (cmd/doorman-agent, package kube/agent): a request
// over the agent's unix socket, which the agent answers from its caches
// (waiting briefly for a pod it has not seen yet), and, when the agent
// does not answer, the file the agent last wrote for the pod on the node.
// It imports nothing of Kubernetes' client libraries: every CNI ADD execs
// the doorman binary, and their package initialization would slow each
// one down (about 25 ms, measured; see docs/benchmarks.md, "Issue 28").
package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/doorman-net/doorman/conf"
)

// Defaults of the agent's places on the node.
const (
	// DefaultDir holds the agent's socket, pod files and secret files.
	DefaultDir = "/run/doorman/agent"
	// SocketName is the socket's name in the directory.
	SocketName = "agent.sock"
)

// Answer is a pod's effective policy, as the agent computed it.
type Answer struct {
	// Namespace, Name and UID name the pod.
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	// Policy is its mode, entries and request rules.
	Policy *conf.Policy `json:"policy"`
	// AllowDirect and AllowICMP are its direct destinations and ICMP.
	AllowDirect []conf.Direct `json:"allowDirect,omitempty"`
	AllowICMP   bool          `json:"allowICMP,omitempty"`
	// RuleSets are the named rule sets its EgressPolicies ask for.
	RuleSets []string `json:"ruleSets,omitempty"`
	// Sources and Notes say what shaped it and what doorman could not
	// express exactly (and how it erred closed).
	Sources []string `json:"sources,omitempty"`
	Notes   []string `json:"notes,omitempty"`
	// Error, if set, refuses the pod (its annotations do not parse):
	// Policy is then nil.
	Error string `json:"error,omitempty"`
	// Computed is when the agent computed it.
	Computed time.Time `json:"computed"`
}

// PodFile is where the agent writes pod namespace/name's answer under dir.
func PodFile(dir, namespace, name string) string {
	return filepath.Join(dir, "pods", namespace, name+".json")
}

// ErrNoAnswer says that neither the agent nor a file it wrote had the
// pod's policy.
var ErrNoAnswer = errors.New("the doorman node agent has no policy for the pod")

// PodError is a pod the agent refuses, with why.
type PodError struct{ Reason string }

func (e *PodError) Error() string { return e.Reason }

// Get returns pod namespace/name's answer: the agent's, over the socket in
// dir within timeout (the agent waits for a pod it has not seen yet),
// else the file it last wrote for a pod of that uid (uid "": any). The
// error is ErrNoAnswer (wrapped, with why the agent did not answer), or a
// *PodError the agent gave for the pod. fromFile says the answer came
// from the file.
func Get(dir, namespace, name, uid string, timeout time.Duration) (a *Answer, fromFile bool, err error) {
	a, err = ask(dir, namespace, name, uid, timeout)
	if err == nil {
		if a.Error != "" {
			return nil, false, &PodError{Reason: a.Error}
		}
		return a, false, nil
	}
	var pe *PodError
	if errors.As(err, &pe) {
		return nil, false, err
	}
	f, ferr := ReadFile(dir, namespace, name, uid)
	if ferr != nil {
		return nil, false, fmt.Errorf("%w: agent: %v; file: %v", ErrNoAnswer, err, ferr)
	}
	if f.Error != "" {
		return nil, true, &PodError{Reason: f.Error}
	}
	return f, true, nil
}

// ReadFile reads the answer the agent last wrote for the pod; one for
// another uid (a pod of the same name before) is not the pod's.
func ReadFile(dir, namespace, name, uid string) (*Answer, error) {
	data, err := os.ReadFile(PodFile(dir, namespace, name))
	if err != nil {
		return nil, err
	}
	var a Answer
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("%s: %w", PodFile(dir, namespace, name), err)
	}
	if uid != "" && a.UID != uid {
		return nil, fmt.Errorf("%s is for pod uid %s, not %s", PodFile(dir, namespace, name), a.UID, uid)
	}
	if a.Policy == nil && a.Error == "" {
		return nil, fmt.Errorf("%s holds no policy", PodFile(dir, namespace, name))
	}
	return &a, nil
}

// ask asks the agent over its socket.
func ask(dir, namespace, name, uid string, timeout time.Duration) (*Answer, error) {
	sock := filepath.Join(dir, SocketName)
	c := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}, Timeout: timeout}
	q := url.Values{"uid": {uid}, "wait": {timeout.String()}}
	u := "http://agent/v1/pods/" + url.PathEscape(namespace) + "/" + url.PathEscape(name) + "?" + q.Encode()
	resp, err := c.Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return nil, err
	}
	switch resp.StatusCode {
	case http.StatusOK, http.StatusUnprocessableEntity:
		var a Answer
		if err := json.Unmarshal(body, &a); err != nil {
			return nil, fmt.Errorf("agent's answer: %w", err)
		}
		if resp.StatusCode == http.StatusUnprocessableEntity {
			return nil, &PodError{Reason: a.Error}
		}
		if a.Policy == nil {
			return nil, errors.New("agent's answer holds no policy")
		}
		return &a, nil
	}
	return nil, fmt.Errorf("agent: %s: %s", resp.Status, bytesLine(body))
}

func bytesLine(b []byte) string {
	if len(b) > 200 {
		b = b[:200]
	}
	return string(b)
}
