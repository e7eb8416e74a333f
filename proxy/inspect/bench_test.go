package inspect

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// BenchmarkKeepAlive is one process's view of the inspected keep-alive
// path: HTTP/1.1 clients on keep-alive sessions, a body rule that parses
// every request, an HTTP/2 upstream. Client and upstream share the CPU
// with the Server, so it profiles the Server's share, not its speed.
func BenchmarkKeepAlive(b *testing.B) {
	bd := newBed(b, "api.example.test\ninspect api.example.test deny POST /v1/messages json:tools[].type=web_search*\n", os.Getenv("BENCH_UP_H1") == "")
	cl := bd.client(false)
	const body = `{"model":"m","max_tokens":16,"messages":[{"role":"user","content":"hi"}],"tools":[{"type":"bash_20250124","name":"bash"}]}`
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			req, _ := http.NewRequest("POST", "https://"+host+"/v1/messages", strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := cl.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 200 {
				b.Errorf("status %d", resp.StatusCode)
				return
			}
		}
	})
}
