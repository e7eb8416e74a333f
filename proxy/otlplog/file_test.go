package otlplog_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/doorman-net/doorman/proxy/otlplog"
)

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}

	good := write("good.json", `{"endpoint": "otel.example.com:4318", "insecure": true,
		"headers": {"Authorization": "Bearer t0ken"}, "queueSize": 64}`)
	c, err := otlplog.LoadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	if c.Endpoint != "otel.example.com:4318" || !c.Insecure || c.Headers["Authorization"] != "Bearer t0ken" || c.QueueSize != 64 {
		t.Errorf("LoadFile = %+v", c)
	}

	off := write("off.json", `{}`)
	if c, err := otlplog.LoadFile(off); err != nil || c.Endpoint != "" {
		t.Errorf("no endpoint: %+v, %v; want export disabled, no error", c, err)
	}

	for name, c := range map[string]struct{ body, want string }{
		"unknown.json": {`{"endpoint": "http://127.0.0.1:4318", "endpont": "x"}`, `"endpont"`},
		"badurl.json":  {`{"endpoint": "ftp://127.0.0.1:4318"}`, `"ftp://127.0.0.1:4318"`},
		"queue.json":   {`{"endpoint": "http://127.0.0.1:4318", "queueSize": -5}`, "-5"},
		"two.json":     {`{} {}`, "more than one"},
		"notjson.json": {`endpoint: x`, "invalid character"},
	} {
		p := write(name, c.body)
		_, err := otlplog.LoadFile(p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %v, want one naming the file and %s", name, err, c.want)
		}
	}
	if _, err := otlplog.LoadFile(filepath.Join(dir, "absent.json")); err == nil || !strings.Contains(err.Error(), "absent.json") {
		t.Errorf("absent file: %v", err)
	}
}

func TestWriteFileRoundTrip(t *testing.T) {
	p := filepath.Join(t.TempDir(), "otlp.json")
	want := otlplog.Config{Endpoint: "https://otel.example.com:4318", Headers: map[string]string{"Authorization": "Bearer t0ken"}, QueueSize: 10}
	if err := otlplog.WriteFile(p, want); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600: the headers may hold a token", fi.Mode().Perm())
	}
	got, err := otlplog.LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Endpoint != want.Endpoint || got.Headers["Authorization"] != "Bearer t0ken" || got.QueueSize != 10 || got.Insecure {
		t.Errorf("read back %+v, want %+v", got, want)
	}
	if err := otlplog.WriteFile(p, otlplog.Config{Endpoint: "nope"}); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("invalid settings written: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Dir(p)); len(entries) != 1 {
		t.Errorf("directory holds %d files, want only otlp.json", len(entries))
	}
}
