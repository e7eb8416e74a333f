package agentclient

import (
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/doorman-net/doorman/conf"
)

func serve(t *testing.T, dir string, h http.HandlerFunc) {
	l, err := net.Listen("unix", filepath.Join(dir, SocketName))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

func writeFile(t *testing.T, dir string, a Answer) {
	p := PodFile(dir, a.Namespace, a.Name)
	os.MkdirAll(filepath.Dir(p), 0o755)
	b, _ := json.Marshal(a)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGet(t *testing.T) {
	pol, _ := conf.NewPolicy(conf.ModeAllowlist, []string{"api.example.com"})
	t.Run("agent answers", func(t *testing.T) {
		dir := t.TempDir()
		var asked string
		serve(t, dir, func(w http.ResponseWriter, r *http.Request) {
			asked = r.URL.Path + "?" + r.URL.RawQuery
			json.NewEncoder(w).Encode(Answer{Namespace: "a", Name: "web", UID: "u1", Policy: pol})
		})
		a, fromFile, err := Get(dir, "a", "web", "u1", time.Second)
		if err != nil || fromFile || !a.Policy.Equal(pol) {
			t.Fatalf("%+v %v %v", a, fromFile, err)
		}
		if asked != "/v1/pods/a/web?uid=u1&wait=1s" {
			t.Errorf("asked %s", asked)
		}
	})
	t.Run("agent refuses the pod", func(t *testing.T) {
		dir := t.TempDir()
		serve(t, dir, func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusUnprocessableEntity)
			json.NewEncoder(w).Encode(Answer{Error: "annotation doorman.io/mode: invalid"})
		})
		writeFile(t, dir, Answer{Namespace: "a", Name: "web", UID: "u1", Policy: pol})
		_, _, err := Get(dir, "a", "web", "u1", time.Second)
		var pe *PodError
		if !errors.As(err, &pe) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("no agent: its file", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, Answer{Namespace: "a", Name: "web", UID: "u1", Policy: pol})
		a, fromFile, err := Get(dir, "a", "web", "u1", 200*time.Millisecond)
		if err != nil || !fromFile || !a.Policy.Equal(pol) {
			t.Fatalf("%+v %v %v", a, fromFile, err)
		}
	})
	t.Run("no agent, a file of another pod of that name", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, dir, Answer{Namespace: "a", Name: "web", UID: "old", Policy: pol})
		_, _, err := Get(dir, "a", "web", "u1", 200*time.Millisecond)
		if !errors.Is(err, ErrNoAnswer) {
			t.Fatalf("err %v", err)
		}
	})
	t.Run("nothing", func(t *testing.T) {
		_, _, err := Get(t.TempDir(), "a", "web", "u1", 200*time.Millisecond)
		if !errors.Is(err, ErrNoAnswer) {
			t.Fatalf("err %v", err)
		}
	})
}
