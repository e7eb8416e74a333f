package agent

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/sandbox"
)

// TestMetricsFromDecisionLog follows a decision log written as the
// proxy writes it (slog JSON lines with decisionlog's keys) and checks
// the counts the registry serves.
func TestMetricsFromDecisionLog(t *testing.T) {
	dir := t.TempDir()
	logFile := filepath.Join(dir, "c1-eth0.log")
	f, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	log := slog.New(slog.NewJSONHandler(f, nil)).With(decisionlog.SandboxKey, "team-a/web-0", decisionlog.PodUIDKey, "u1")
	conn := func(verdict string) {
		log.Info(decisionlog.KindConnection, decisionlog.ClientKey, "10.244.0.5:40000", decisionlog.DstKey, "203.0.113.7:443",
			decisionlog.NameKey, "api.example.com", decisionlog.VerdictKey, verdict, decisionlog.ReasonKey, "")
	}
	conn(decisionlog.Allow)
	conn(decisionlog.Allow)
	conn(decisionlog.Deny)
	log.Warn(decisionlog.KindDenials, decisionlog.KindKey, decisionlog.KindConnection, decisionlog.VerdictKey, decisionlog.Deny,
		decisionlog.CountKey, 5, decisionlog.FirstKey, time.Now(), decisionlog.LastKey, time.Now())
	log.Info(decisionlog.KindDNS, decisionlog.NameKey, "evil.example.org", decisionlog.VerdictKey, decisionlog.Deny, decisionlog.RcodeKey, "REFUSED")
	log.Warn(decisionlog.KindRequest, decisionlog.NameKey, "api.example.com", "method", "POST", decisionlog.PathKey, "/v1/files", decisionlog.VerdictKey, decisionlog.Deny)
	log.Info("policy loaded", decisionlog.PathKey, "/run/doorman/x/policy") // not a decision

	m := NewMetrics()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m.Sandboxes(ctx, []*sandbox.State{{Key: "c1-eth0", ID: "team-a/web-0", Runtime: "cni", PodUID: "u1", LogFile: logFile}})
	want := map[string]float64{
		`doorman_connections_total{namespace="team-a",pod="web-0",verdict="allow"}`: 2,
		`doorman_connections_total{namespace="team-a",pod="web-0",verdict="deny"}`:  6,
		`doorman_dns_queries_total{namespace="team-a",pod="web-0",verdict="deny"}`:  1,
		`doorman_requests_total{namespace="team-a",pod="web-0",verdict="deny"}`:     1,
	}
	var got map[string]float64
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		got = gather(t, m)
		ok := true
		for k, v := range want {
			ok = ok && got[k] == v
		}
		if ok {
			break
		}
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
	// Another line later is counted too.
	conn(decisionlog.Deny)
	k := `doorman_connections_total{namespace="team-a",pod="web-0",verdict="deny"}`
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && gather(t, m)[k] != 7; time.Sleep(50 * time.Millisecond) {
	}
	if v := gather(t, m)[k]; v != 7 {
		t.Errorf("after one more denial: %v, want 7", v)
	}
	// The sandbox gone: the follower stops; Forget drops the series.
	m.Sandboxes(ctx, nil)
	m.Forget("team-a", "web-0")
	if v, ok := gather(t, m)[k]; ok {
		t.Errorf("series kept after Forget: %v", v)
	}
}

// gather returns every sample of m's doorman metrics by name{labels}.
func gather(t *testing.T, m *Metrics) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, met := range mf.GetMetric() {
			key := mf.GetName() + "{" + labelsOf(met) + "}"
			switch {
			case met.Counter != nil:
				out[key] = met.Counter.GetValue()
			case met.Gauge != nil:
				out[key] = met.Gauge.GetValue()
			}
		}
	}
	return out
}

func labelsOf(m *dto.Metric) string {
	s := ""
	for i, l := range m.GetLabel() {
		if i > 0 {
			s += ","
		}
		s += l.GetName() + `="` + l.GetValue() + `"`
	}
	return s
}

// TestDashboardMetrics checks that every doorman metric the shipped
// Grafana dashboard queries is one the agent serves.
func TestDashboardMetrics(t *testing.T) {
	data, err := os.ReadFile("../../deploy/grafana/doorman-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	m.Count("a", "b", decisionlog.Decision{Kind: decisionlog.KindConnection, Verdict: "allow"})
	m.Count("a", "b", decisionlog.Decision{Kind: decisionlog.KindDNS, Verdict: "deny"})
	m.Count("a", "b", decisionlog.Decision{Kind: decisionlog.KindRequest, Verdict: "deny"})
	m.Count("a", "b", decisionlog.Decision{Kind: decisionlog.KindLimit, Verdict: "deny"})
	m.Applied("a", "b", "applied")
	m.Notes("a", "b", 1)
	m.restarts.WithLabelValues("a", "b").Set(0)
	served := map[string]bool{}
	mfs, _ := m.Registry.Gather()
	for _, mf := range mfs {
		served[mf.GetName()] = true
	}
	re := regexp.MustCompile(`doorman_[a-z_]+`)
	names := re.FindAllString(string(data), -1)
	if len(names) == 0 {
		t.Fatal("the dashboard queries no doorman metric")
	}
	for _, n := range names {
		if !served[n] && n != "doorman_egress" {
			t.Errorf("the dashboard queries %s, which the agent does not serve", n)
		}
	}
}
