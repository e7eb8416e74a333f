package integration

import (
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// otlpReceiver is a real OTLP/HTTP logs endpoint, in the test's host
// namespace (where the proxies run), decoding with the official protos.
type otlpReceiver struct {
	addr string
	mu   sync.Mutex
	reqs []*collogspb.ExportLogsServiceRequest
}

func startOTLPReceiver(t *testing.T, e *cniEnv) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	var ln net.Listener
	if err := e.net.InHost(func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	r.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var m collogspb.ExportLogsServiceRequest
		if err := proto.Unmarshal(body, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.reqs = append(r.reqs, &m)
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collogspb.ExportLogsServiceResponse{})
		w.Write(out)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return r
}

// find returns the attributes of the first exported record with body msg
// and attribute name == value, and the sandbox resource attribute.
func (r *otlpReceiver) find(msg, name string) (map[string]string, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, req := range r.reqs {
		for _, rl := range req.ResourceLogs {
			sandbox := ""
			for _, a := range rl.GetResource().GetAttributes() {
				if a.Key == "doorman.sandbox" {
					sandbox = a.Value.GetStringValue()
				}
			}
			for _, sl := range rl.ScopeLogs {
				for _, lr := range sl.LogRecords {
					if lr.Body.GetStringValue() != msg {
						continue
					}
					attrs := map[string]string{}
					for _, a := range lr.Attributes {
						attrs[a.Key] = anyString(a.Value)
					}
					if attrs["name"] == name {
						return attrs, sandbox
					}
				}
			}
		}
	}
	return nil, ""
}

func anyString(v *commonpb.AnyValue) string {
	switch x := v.Value.(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strings.TrimSpace(itoa(int(x.IntValue)))
	}
	return v.String()
}

func TestCNIOTLPExport(t *testing.T) {
	e := newCNIEnv(t)
	r := startOTLPReceiver(t, e)
	c := e.newContainer()
	e.mustAdd(c, e.conflist(map[string]any{"otlpEndpoint": "http://" + r.addr}))
	if res := curl(t, c.ns, e.caFile, "https://"+apiName+"/"); res.exit != 0 {
		t.Fatalf("allowed HTTPS: %v", res)
	}
	curl(t, c.ns, e.caFile, "--resolve", evilName+":443:"+evilAddr4.String(), "https://"+evilName+"/")
	deadline := time.Now().Add(15 * time.Second)
	for {
		allow, sbx := r.find("connection", apiName)
		deny, _ := r.find("connection", evilName)
		if allow != nil && deny != nil {
			if allow["verdict"] != "allow" || deny["verdict"] != "deny" || sbx != c.rt.ContainerID || allow["proto"] != "tls" {
				t.Fatalf("exported records: allow %v, deny %v, sandbox %q", allow, deny, sbx)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("records did not arrive at the collector (allow %v, deny %v)", allow, deny)
		}
		time.Sleep(100 * time.Millisecond)
	}

	// A collector that is down never holds a connection up.
	down := e.newContainer()
	e.mustAdd(down, e.conflist(map[string]any{"otlpEndpoint": "http://127.0.0.1:9", "otlpInsecure": true}))
	start := time.Now()
	for range 5 {
		if res := curl(t, down.ns, e.caFile, "https://"+apiName+"/"); res.exit != 0 {
			t.Fatalf("allowed HTTPS with the collector down: %v", res)
		}
	}
	t.Logf("5 requests with the collector down: %v", time.Since(start))
	e.waitDecision(down, decided(apiName, "allow"))
}
