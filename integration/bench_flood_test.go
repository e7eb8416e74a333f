package integration

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/doorman-net/doorman/integration/testnet"
	"github.com/doorman-net/doorman/sandbox"
)

// benchFloodSamples is how many requests of the neighbour each phase
// times.
const benchFloodSamples = 40

// BenchmarkFloodNeighbour reports the median latency of a neighbour's
// HTTPS requests (a new connection each) while another sandbox on the
// same network floods each of its caps, beside the neighbour's baseline,
// and the flooding proxy's CPU while 1000 ClientHellos trickle into it
// in 1-byte records. The flooder runs with smaller caps than the
// defaults (500 connections, 400 per upstream) so that the floods are
// quick to set up; the DNS and pending caps are the defaults.
//
//	go test -run '^$' -bench FloodNeighbour ./integration/
func BenchmarkFloodNeighbour(b *testing.B) {
	bed := newFloodBed(b, "")
	flooder := bed.sandbox(map[string]any{"connections": 500, "perUpstream": 400})
	neighbour := bed.sandbox(nil)
	client := neighbour.client()
	// sample times the neighbour's requests; it may run on a goroutine
	// of its own.
	sample := func(phase string) (float64, error) {
		var ms []float64
		for range benchFloodSamples {
			d, err := neighbour.get(client)
			if err != nil {
				return 0, fmt.Errorf("%s: the neighbour's request: %w", phase, err)
			}
			ms = append(ms, float64(d.Microseconds())/1000)
			time.Sleep(20 * time.Millisecond)
		}
		s := benchSpreadOf(ms)
		b.Logf("%-12s neighbour median %.2f ms (min %.2f, max %.2f)", phase, s.med, s.min, s.max)
		return s.med, nil
	}
	measure := func(phase string) float64 {
		med, err := sample(phase)
		if err != nil {
			b.Fatal(err)
		}
		return med
	}
	for b.Loop() {
		base := measure("baseline")

		// Connections: 600 held to two upstreams, 500 relayed, while
		// more keep coming and are refused.
		held := append(flooder.holdAt(testnet.PortRecorder, 300), flooder.holdAt(testnet.PortPostgres, 300)...)
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				closeAll(flooder.holdAt(testnet.PortRecorder, 10))
			}
		})
		conns := measure("connections")
		close(stop)
		wg.Wait()
		closeAll(held)

		// Ports: 450 held to one upstream, 400 relayed.
		held = flooder.holdAt(testnet.PortRedis, 450)
		ports := measure("ports")
		closeAll(held)

		// Trickled hellos: 1000 connections, a 1-byte record each every
		// 20 ms, as measured before the caps (a full core then).
		// The neighbour is timed from a few seconds in, once the 1000
		// are open and trickling; the trickle stops when it is done.
		pid := benchProxyPID(b, bed, flooder)
		cpu0, t0 := benchCPUSeconds(pid), time.Now()
		stop = make(chan struct{})
		var trickleMed float64
		var trickleErr error
		wg.Go(func() {
			defer close(stop)
			time.Sleep(3 * time.Second)
			trickleMed, trickleErr = sample("trickle")
		})
		flooder.trickle(1000, 20*time.Millisecond, stop)
		cpu := (benchCPUSeconds(pid) - cpu0) / time.Since(t0).Seconds()
		wg.Wait()
		if trickleErr != nil {
			b.Fatal(trickleErr)
		}

		// DNS: queries for a denied name as fast as one client sends
		// them, past the default 1000 a second.
		stop = make(chan struct{})
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				flooder.dnsFlood(2000, evilName, 100*time.Millisecond)
			}
		})
		dnsMed := measure("dns")
		close(stop)
		wg.Wait()

		b.ReportMetric(base, "baseline-ms")
		b.ReportMetric(conns, "connections-flood-ms")
		b.ReportMetric(ports, "ports-flood-ms")
		b.ReportMetric(trickleMed, "trickle-flood-ms")
		b.ReportMetric(dnsMed, "dns-flood-ms")
		b.ReportMetric(100*cpu, "trickle-proxy-cpu-%")
		b.ReportMetric(0, "ns/op")
	}
}

// benchProxyPID is the process id of s's proxy.
func benchProxyPID(b *testing.B, bed *floodBed, s *floodSandbox) int {
	st, err := sandbox.Load(bed.stateDir, s.rt.ContainerID+"-eth0")
	if err != nil {
		b.Fatal(err)
	}
	return st.PID
}

// benchCPUSeconds is the user and system CPU time of process pid.
func benchCPUSeconds(pid int) float64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	return (utime + stime) / 100
}
