package agent

import (
	"context"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/doorman-net/doorman/proxy/decisionlog"
	"github.com/doorman-net/doorman/sandbox"
)

// Metrics are the agent's Prometheus metrics: per pod (labels namespace
// and pod), what its proxy decided, read from its decision log, its
// proxy's restarts, and the agent's policy applications.
type Metrics struct {
	Registry *prometheus.Registry

	connections *prometheus.CounterVec // verdict: allow, deny, error
	requests    *prometheus.CounterVec // verdict
	dns         *prometheus.CounterVec // verdict
	limited     *prometheus.CounterVec
	restarts    *prometheus.GaugeVec
	applied     *prometheus.CounterVec // result: applied, unchanged, error
	notes       *prometheus.GaugeVec

	mu        sync.Mutex
	followers map[string]context.CancelFunc // by sandbox key
}

// NewMetrics returns the metrics, registered in a registry of their own
// (with the Go and process collectors).
func NewMetrics() *Metrics {
	pod := []string{"namespace", "pod"}
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "doorman_connections_total",
			Help: "Connections the pod's proxy decided, by verdict (allow, deny, error: allowed but the upstream failed)."}, append(pod, "verdict")),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "doorman_requests_total",
			Help: "Requests to inspected hosts judged by request rules, by verdict (deny: refused by a rule)."}, append(pod, "verdict")),
		dns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "doorman_dns_queries_total",
			Help: "DNS queries the pod's DNS filter decided, by verdict (deny: refused)."}, append(pod, "verdict")),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "doorman_limited_total",
			Help: "Connections and queries the pod's proxy refused at one of its caps."}, pod),
		restarts: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "doorman_proxy_restarts",
			Help: "Workers the pod's proxy supervisor started after the first."}, pod),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "doorman_policy_applications_total",
			Help: "Policies the agent applied to the pod's live sandbox, by result (applied, unchanged, error)."}, append(pod, "result")),
		notes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "doorman_policy_notes",
			Help: "Things doorman could not express exactly in the pod's policy (it erred closed), as the agent's events say."}, pod),
		followers: map[string]context.CancelFunc{},
	}
	m.Registry.MustRegister(m.connections, m.requests, m.dns, m.limited, m.restarts, m.applied, m.notes,
		prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return m
}

// Count counts one decision line of pod namespace/name.
func (m *Metrics) Count(namespace, name string, d decisionlog.Decision) {
	n := float64(d.Times())
	switch {
	case d.Kind == decisionlog.KindLimit:
		m.limited.WithLabelValues(namespace, name).Add(n)
	case d.IsDNS():
		m.dns.WithLabelValues(namespace, name, d.Verdict).Add(n)
	case d.IsRequest():
		m.requests.WithLabelValues(namespace, name, d.Verdict).Add(n)
	default:
		m.connections.WithLabelValues(namespace, name, d.Verdict).Add(n)
	}
}

// Applied counts an application of a policy to namespace/name's sandbox.
func (m *Metrics) Applied(namespace, name, result string) {
	m.applied.WithLabelValues(namespace, name, result).Inc()
}

// Notes sets how many notes namespace/name's policy has.
func (m *Metrics) Notes(namespace, name string, n int) {
	m.notes.WithLabelValues(namespace, name).Set(float64(n))
}

// Sandboxes follows the decision logs of the enforced pod sandboxes in
// states (from the start of each log), stops following those no longer
// there, and records their proxies' restarts.
func (m *Metrics) Sandboxes(ctx context.Context, states []*sandbox.State) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seen := map[string]bool{}
	for _, s := range states {
		ns, name, ok := strings.Cut(s.ID, "/")
		if !ok || s.Runtime != "cni" || s.PodUID == "" || s.Unenforced != "" || s.LogFile == "" {
			continue
		}
		seen[s.Key] = true
		if sv := s.Supervision(); sv != nil {
			m.restarts.WithLabelValues(ns, name).Set(float64(sv.Restarts))
		}
		if _, ok := m.followers[s.Key]; ok {
			continue
		}
		fctx, cancel := context.WithCancel(ctx)
		m.followers[s.Key] = cancel
		go decisionlog.Follow(fctx, s.LogFile, 0, func(d decisionlog.Decision) error {
			m.Count(ns, name, d)
			return nil
		})
	}
	for key, cancel := range m.followers {
		if !seen[key] {
			cancel()
			delete(m.followers, key)
		}
	}
}

// Forget drops the series of a pod that is gone.
func (m *Metrics) Forget(namespace, name string) {
	l := prometheus.Labels{"namespace": namespace, "pod": name}
	for _, v := range []*prometheus.CounterVec{m.connections, m.requests, m.dns, m.limited, m.applied} {
		v.DeletePartialMatch(l)
	}
	m.restarts.DeletePartialMatch(l)
	m.notes.DeletePartialMatch(l)
}
