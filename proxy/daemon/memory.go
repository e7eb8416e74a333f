package daemon

import (
	"context"
	"runtime/debug"
	"time"

	"github.com/doorman-net/doorman/proxy"
)

// idleDropAfter is how long a proxy goes without a connection before it
// unmaps the binary pages its work mapped (dropBinaryPages): a sandbox
// idle that long is likely to stay idle, while one between bursts would
// only map them again.
const idleDropAfter = time.Minute

// returnIdleMemory gives the heap's free pages back to the kernel once a
// burst of connections is over, and unmaps the binary's pages once the
// proxy has been idle for idleDropAfter. The Go runtime keeps free pages
// for minutes otherwise, and a host runs one proxy per sandbox: their idle
// footprint is what adds up.
func returnIdleMemory(ctx context.Context, p *proxy.Proxy) {
	t := time.NewTicker(10 * time.Second)
	defer t.Stop()
	var seen int64
	lastBusy, dropped := time.Now(), true // dropped a second after start
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			st := p.Stats()
			total := st.Allowed + st.Denied
			if total != seen || st.Active != 0 {
				lastBusy, dropped = now, false
			}
			if total != seen && st.Active == 0 {
				seen = total
				debug.FreeOSMemory()
			}
			if !dropped && st.Active == 0 && now.Sub(lastBusy) >= idleDropAfter {
				dropBinaryPages()
				dropped = true
			}
		}
	}
}
