package inspect

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkKeepAlive is one process's view of the inspected keep-alive
// path of BenchmarkInspect (integration): HTTP/1.1 clients on keep-alive
// sessions, a body rule that parses every request, an upstream that
// offers HTTP/2. Client and upstream share the process with the Server:
// it is for profiling the Server's share (-cpuprofile, allocations), not
// a measure of its speed.
func BenchmarkKeepAlive(b *testing.B) {
	bd := newBed(b, "api.example.test\ninspect api.example.test deny POST /v1/messages json:tools[].type=web_search*\n", true)
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
