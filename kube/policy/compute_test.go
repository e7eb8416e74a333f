package policy

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	npa "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/kube/api/v1alpha1"
)

// probe is one connection and whether it must be admitted.
type probe struct {
	dst  string
	port uint16
	want bool
}

func TestCompute(t *testing.T) {
	client := pod("team-a", "web-0", "10.244.0.5", "app", "web")
	other := pod("team-b", "api-0", "10.244.1.7", "app", "api")
	namespaces := map[string]*corev1.Namespace{"team-a": ns("team-a", "tier", "apps"), "team-b": ns("team-b", "tier", "apps")}
	for _, tc := range []struct {
		name     string
		policies []*npa.ClusterNetworkPolicy
		def      Defaults
		annot    map[string]string
		probes   []probe
		mode     conf.Mode
		notes    []string // substrings, one per expected note
	}{
		{
			name:   "no policy: the installer's",
			def:    defaults(conf.ModeAllowlist, "api.example.com"),
			probes: []probe{{"api.example.com", 443, true}, {"example.org", 443, false}},
		},
		{
			name:     "admin accepts domains on 443, denies the rest (the NPEP's allowlist)",
			policies: []*npa.ClusterNetworkPolicy{cnp("allow", npa.AdminTier, 55, subjNS("team-a"), egress(Accept, domains("my-service.com", "*.cloud-provider.io"), tcp(443)), egress(Deny, networks("0.0.0.0/0", "::/0")))},
			def:      defaults(conf.ModeOpen),
			probes: []probe{{"my-service.com", 443, true}, {"my-service.com", 80, false}, {"x.y.cloud-provider.io", 443, true},
				{"cloud-provider.io", 443, false}, {"example.org", 443, false}, {"203.0.113.9", 443, false}},
		},
		{
			name: "baseline default deny under an admin accept",
			policies: []*npa.ClusterNetworkPolicy{
				cnp("allow", npa.AdminTier, 55, subjNS("team-a"), egress(Accept, domains("my-service.com"), tcp(443))),
				cnp("default-deny", npa.BaselineTier, 0, allNS, egress(Deny, networks("0.0.0.0/0", "::/0"))),
			},
			def:    defaults(conf.ModeOpen),
			probes: []probe{{"my-service.com", 443, true}, {"example.org", 443, false}},
		},
		{
			name:     "subject elsewhere: not selected",
			policies: []*npa.ClusterNetworkPolicy{cnp("b", npa.AdminTier, 1, subjNS("team-b"), egress(Accept, domains("b.example.com")))},
			def:      defaults(conf.ModeAllowlist, "a.example.com"),
			probes:   []probe{{"a.example.com", 443, true}, {"b.example.com", 443, false}},
		},
		{
			name: "admin deny beats a lower-priority admin accept",
			policies: []*npa.ClusterNetworkPolicy{
				cnp("deny", npa.AdminTier, 10, subjNS("team-a"), egress(Deny, domains("bad.example.com"))),
				cnp("accept", npa.AdminTier, 20, subjNS("team-a"), egress(Accept, domains("bad.example.com", "good.example.com"))),
			},
			def:    defaults(conf.ModeAllowlist),
			probes: []probe{{"bad.example.com", 443, false}, {"good.example.com", 443, true}},
		},
		{
			name: "a lower-priority deny does not take an accept back",
			policies: []*npa.ClusterNetworkPolicy{
				cnp("accept", npa.AdminTier, 10, subjNS("team-a"), egress(Accept, domains("good.example.com"))),
				cnp("deny", npa.AdminTier, 20, subjNS("team-a"), egress(Deny, domains("good.example.com"))),
			},
			def:    defaults(conf.ModeAllowlist),
			probes: []probe{{"good.example.com", 443, true}},
		},
		{
			name: "pass skips the admin tier's deny, baseline accepts",
			policies: []*npa.ClusterNetworkPolicy{
				cnp("pass", npa.AdminTier, 10, subjNS("team-a"), egress(Pass, domains("*.example.com"))),
				cnp("deny", npa.AdminTier, 20, allNS, egress(Deny, networks("0.0.0.0/0", "::/0"))),
				cnp("base", npa.BaselineTier, 10, allNS, egress(Accept, domains("api.example.com"), tcp(443))),
			},
			def:    defaults(conf.ModeAllowlist),
			probes: []probe{{"api.example.com", 443, true}, {"api.example.com", 80, false}, {"www.example.com", 443, false}, {"example.org", 443, false}},
		},
		{
			name: "admin deny of everything beats baseline accept",
			policies: []*npa.ClusterNetworkPolicy{
				cnp("deny", npa.AdminTier, 20, allNS, egress(Deny, networks("0.0.0.0/0", "::/0"))),
				cnp("base", npa.BaselineTier, 10, allNS, egress(Accept, domains("api.example.com"))),
			},
			def:    defaults(conf.ModeAllowlist, "installer.example.com"),
			probes: []probe{{"api.example.com", 443, false}, {"installer.example.com", 443, false}},
		},
		{
			name: "what no tier decides goes to the installer's policy",
			policies: []*npa.ClusterNetworkPolicy{
				cnp("accept", npa.AdminTier, 20, allNS, egress(Accept, domains("api.example.com"))),
			},
			def:    defaults(conf.ModeAllowlist, "installer.example.com"),
			probes: []probe{{"api.example.com", 443, true}, {"installer.example.com", 443, true}, {"example.org", 443, false}},
		},
		{
			name:     "networks and port ranges",
			policies: []*npa.ClusterNetworkPolicy{cnp("n", npa.AdminTier, 1, allNS, egress(Accept, networks("203.0.113.0/24"), tcpRange(8000, 8999)))},
			def:      defaults(conf.ModeAllowlist),
			probes:   []probe{{"203.0.113.7", 8080, true}, {"203.0.113.7", 443, false}, {"198.51.100.1", 8080, false}},
		},
		{
			name: "a deny network carves a hole in an accept network",
			policies: []*npa.ClusterNetworkPolicy{cnp("n", npa.AdminTier, 1, allNS,
				egress(Deny, networks("203.0.113.128/25"), tcp(22)),
				egress(Accept, networks("203.0.113.0/24")))},
			def: defaults(conf.ModeAllowlist),
			probes: []probe{{"203.0.113.7", 22, true}, {"203.0.113.200", 22, false}, {"203.0.113.200", 21, true},
				{"203.0.113.200", 23, true}, {"203.0.113.255", 443, true}},
		},
		{
			name: "a private deny before a domain accept: the guard holds it",
			policies: []*npa.ClusterNetworkPolicy{cnp("n", npa.AdminTier, 1, allNS,
				egress(Deny, networks("10.0.0.0/8", "192.168.0.0/16")),
				egress(Accept, domains("*.example.com")))},
			def:    defaults(conf.ModeAllowlist),
			probes: []probe{{"www.example.com", 443, true}},
		},
		{
			name: "a public deny before a domain accept: doorman cannot say it, errs closed",
			policies: []*npa.ClusterNetworkPolicy{cnp("n", npa.AdminTier, 1, allNS,
				egress(Deny, networks("198.51.100.0/24"), tcp(443)),
				egress(Accept, domains("*.example.com")))},
			def:    defaults(conf.ModeAllowlist),
			probes: []probe{{"www.example.com", 443, false}, {"www.example.com", 80, true}, {"www.example.com", 444, true}},
			notes:  []string{"ClusterNetworkPolicy n egress[1]: *.example.com is not admitted: it overlaps 198.51.100.0/24 port 443 (TCP) of ClusterNetworkPolicy n egress[0]", "ClusterNetworkPolicy n egress[0]"},
		},
		{
			name: "a wildcard minus a name below it errs closed",
			policies: []*npa.ClusterNetworkPolicy{cnp("n", npa.AdminTier, 1, allNS,
				egress(Deny, domains("secret.example.com")),
				egress(Accept, domains("*.example.com", "example.com")))},
			def:    defaults(conf.ModeAllowlist),
			probes: []probe{{"www.example.com", 443, false}, {"example.com", 443, true}, {"secret.example.com", 443, false}},
			notes:  []string{"doorman cannot admit names below a wildcard except some of them"},
		},
		{
			name: "a cluster-domain name minus the service range is not held by the guard",
			policies: []*npa.ClusterNetworkPolicy{cnp("n", npa.AdminTier, 1, allNS,
				egress(Deny, networks("10.96.0.0/16")),
				egress(Accept, domains("*.svc.cluster.local")))},
			def:    defaults(conf.ModeAllowlist),
			probes: []probe{{"api.default.svc.cluster.local", 443, false}},
			notes:  []string{"cannot keep them out of a denied network"},
		},
		{
			name: "pod peers are their addresses",
			policies: []*npa.ClusterNetworkPolicy{cnp("p", npa.AdminTier, 1, subjNS("team-a"),
				egress(Accept, toNS("team-b"), tcp(8080)))},
			def:    defaults(conf.ModeAllowlist),
			probes: []probe{{"10.244.1.7", 8080, true}, {"10.244.1.7", 80, false}, {"10.244.0.5", 8080, false}},
		},
		{
			name:     "UDP is not granted",
			policies: []*npa.ClusterNetworkPolicy{cnp("u", npa.AdminTier, 1, allNS, egress(Accept, networks("203.0.113.0/24"), udp(123)))},
			def:      defaults(conf.ModeAllowlist),
			probes:   []probe{{"203.0.113.1", 123, false}},
			notes:    []string{"doorman relays TCP only"},
		},
		{
			name:     "an installer open default with a deny errs closed",
			policies: []*npa.ClusterNetworkPolicy{cnp("d", npa.AdminTier, 1, allNS, egress(Deny, domains("bad.example.com")), egress(Accept, domains("ok.example.com")))},
			def:      defaults(conf.ModeOpen),
			probes:   []probe{{"ok.example.com", 443, true}, {"other.example.com", 443, false}, {"bad.example.com", 443, false}},
			notes:    []string{"doorman cannot admit every destination except some"},
		},
		{
			name: "installer open under pass-then-deny: what is passed stays open",
			policies: []*npa.ClusterNetworkPolicy{cnp("d", npa.AdminTier, 1, allNS,
				egress(Pass, domains("*.example.com"), tcp(443)), egress(Deny, networks("0.0.0.0/0", "::/0")))},
			def:    defaults(conf.ModeOpen),
			probes: []probe{{"api.example.com", 443, true}, {"api.example.com", 80, false}, {"example.org", 443, false}},
		},
		{
			name:     "installer open and only accepts: open",
			policies: []*npa.ClusterNetworkPolicy{cnp("a", npa.AdminTier, 1, allNS, egress(Accept, domains("ok.example.com")))},
			def:      defaults(conf.ModeOpen),
			mode:     conf.ModeOpen,
		},
		{
			name: "a peer with no field: accept matches nothing, deny everything",
			policies: []*npa.ClusterNetworkPolicy{cnp("x", npa.AdminTier, 1, allNS,
				egress(Accept, []npa.ClusterNetworkPolicyEgressPeer{{}}),
				egress(Deny, []npa.ClusterNetworkPolicyEgressPeer{{}}),
				egress(Accept, domains("api.example.com")))},
			def:    defaults(conf.ModeAllowlist),
			probes: []probe{{"api.example.com", 443, false}},
			notes:  []string{"the rule matches nothing", "the rule matches everything"},
		},
		{
			name:     "annotations narrow: a widening host is dropped",
			policies: []*npa.ClusterNetworkPolicy{cnp("a", npa.AdminTier, 1, allNS, egress(Accept, domains("*.example.com"), tcp(443)))},
			def:      defaults(conf.ModeAllowlist),
			annot:    map[string]string{"doorman.io/allowed-hosts": "api.example.com,evil.example.org"},
			probes:   []probe{{"api.example.com", 443, true}, {"api.example.com", 80, false}, {"www.example.com", 443, false}, {"evil.example.org", 443, false}},
			notes:    []string{"not granted: api.example.com (only api.example.com:443), evil.example.org"},
		},
		{
			name:     "annotation mode open means what is granted",
			policies: []*npa.ClusterNetworkPolicy{cnp("a", npa.AdminTier, 1, allNS, egress(Accept, domains("*.example.com")))},
			def:      defaults(conf.ModeAllowlist),
			annot:    map[string]string{"doorman.io/mode": "open"},
			probes:   []probe{{"api.example.com", 443, true}, {"example.org", 443, false}},
		},
		{
			name:   "annotations narrow the installer's policy when nothing selects the pod",
			def:    defaults(conf.ModeAllowlist, "api.example.com"),
			annot:  map[string]string{"doorman.io/mode": "open"},
			probes: []probe{{"api.example.com", 443, true}, {"example.org", 443, false}},
		},
		{
			name: "annotations replace, when the installer says so",
			def: func() Defaults {
				d := defaults(conf.ModeAllowlist, "api.example.com")
				d.Annotations = AnnotationsReplace
				return d
			}(),
			annot:  map[string]string{"doorman.io/allowed-hosts": "example.org"},
			probes: []probe{{"api.example.com", 443, false}, {"example.org", 443, true}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := client.DeepCopy()
			p.Annotations = tc.annot
			res, err := Compute(p, &Cluster{Namespaces: namespaces, Pods: []*corev1.Pod{client, other}, Policies: tc.policies}, tc.def)
			if err != nil {
				t.Fatal(err)
			}
			if tc.mode != "" && res.Policy.Mode != tc.mode {
				t.Errorf("mode %s, want %s (%v)", res.Policy.Mode, tc.mode, res.Policy)
			}
			for _, pr := range tc.probes {
				if got := admits(t, res, pr.dst, pr.port); got != pr.want {
					t.Errorf("%s:%d admitted %v, want %v; policy %v", pr.dst, pr.port, got, pr.want, res.Policy)
				}
			}
			var msgs []string
			for _, n := range res.Notes {
				msgs = append(msgs, n.Object.String()+": "+n.Message)
			}
			for _, want := range tc.notes {
				if !slices.ContainsFunc(msgs, func(m string) bool { return strings.Contains(m, want) }) {
					t.Errorf("no note with %q; notes:\n%s", want, strings.Join(msgs, "\n"))
				}
			}
			if len(tc.notes) == 0 && len(msgs) > 0 {
				t.Errorf("unexpected notes:\n%s", strings.Join(msgs, "\n"))
			}
		})
	}
}

// TestConformanceEgressTCP ports the network policy API's conformance
// case "egress-tcp" (conformance/base/admin_tier/standard-egress-tcp-rules.yaml
// and tests/admin-network-policy-standard-egress-tcp-rules.go), egress
// only: gryffindor's pods against ravenclaw, slytherin and hufflepuff.
// Where the API admits by default (no rule matches), doorman decides by
// the installer's policy: here open, which doorman cannot narrow by the
// policy's Deny rules, so it errs closed (and says so).
func TestConformanceEgressTCP(t *testing.T) {
	const (
		gryffindor = "network-policy-conformance-gryffindor"
		ravenclaw  = "network-policy-conformance-ravenclaw"
		slytherin  = "network-policy-conformance-slytherin"
		hufflepuff = "network-policy-conformance-hufflepuff"
	)
	harry := pod(gryffindor, "harry-potter-0", "10.0.0.1")
	luna0, luna1 := pod(ravenclaw, "luna-lovegood-0", "10.0.1.1"), pod(ravenclaw, "luna-lovegood-1", "10.0.1.2")
	draco := pod(slytherin, "draco-malfoy-0", "10.0.2.1")
	cedric := pod(hufflepuff, "cedric-diggory-1", "10.0.3.1")
	namespaces := map[string]*corev1.Namespace{}
	for _, n := range []string{gryffindor, ravenclaw, slytherin, hufflepuff} {
		namespaces[n] = ns(n)
	}
	policy := cnp("egress-tcp", npa.AdminTier, 6, subjNS(gryffindor),
		egress(Accept, toNS(ravenclaw)),
		egress(Deny, toNS(ravenclaw)),
		egress(Pass, toNS(ravenclaw)),
		egress(Deny, toNS(slytherin), tcp(80)),
		egress(Pass, toNS(slytherin), tcp(80)),
		egress(Accept, toNS(hufflepuff), tcp(8080)),
		egress(Deny, toNS(hufflepuff)),
	)
	c := &Cluster{Namespaces: namespaces, Pods: []*corev1.Pod{harry, luna0, luna1, draco, cedric}}
	run := func(policies ...*npa.ClusterNetworkPolicy) *Result {
		c.Policies = policies
		res, err := Compute(harry, c, defaults(conf.ModeOpen))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	res := run(policy)
	for _, pr := range []probe{
		{"10.0.1.1", 80, true}, {"10.0.1.1", 8080, true}, // ALLOWED to ravenclaw
		{"10.0.3.1", 8080, true}, {"10.0.3.1", 80, false}, // hufflepuff: 8080 only
		{"10.0.2.1", 80, false}, // DENIED to slytherin at 80
		// The API admits slytherin:8080 (no rule matches); doorman errs
		// closed: the installer's open cannot be narrowed by the denies.
		{"10.0.2.1", 8080, false},
	} {
		if got := admits(t, res, pr.dst, pr.port); got != pr.want {
			t.Errorf("%s:%d admitted %v, want %v; policy %v", pr.dst, pr.port, got, pr.want, res.Policy)
		}
	}
	if !slices.ContainsFunc(res.Notes, func(n Note) bool { return strings.Contains(n.Message, "every destination except some") }) {
		t.Errorf("no note on the installer's open default: %v", res.Notes)
	}

	// The test then swaps the first and second rules (Deny first):
	// ravenclaw is denied.
	swapped := policy.DeepCopy()
	swapped.Spec.Egress[0], swapped.Spec.Egress[1] = swapped.Spec.Egress[1], swapped.Spec.Egress[0]
	res = run(swapped)
	for _, pr := range []probe{{"10.0.1.2", 80, false}, {"10.0.1.2", 8080, false}} {
		if got := admits(t, res, pr.dst, pr.port); got != pr.want {
			t.Errorf("swapped: %s:%d admitted %v, want %v; policy %v", pr.dst, pr.port, got, pr.want, res.Policy)
		}
	}

	// Then Pass first for ravenclaw, and for slytherin Pass before Deny:
	// both go on to the baseline tier, which here admits them.
	passed := policy.DeepCopy()
	passed.Spec.Egress[0], passed.Spec.Egress[2] = passed.Spec.Egress[2], passed.Spec.Egress[0]
	passed.Spec.Egress[3], passed.Spec.Egress[4] = passed.Spec.Egress[4], passed.Spec.Egress[3]
	base := cnp("baseline", npa.BaselineTier, 1, subjNS(gryffindor), egress(Accept, toNS(ravenclaw)), egress(Accept, toNS(slytherin)))
	res = run(passed, base)
	for _, pr := range []probe{{"10.0.1.1", 80, true}, {"10.0.1.1", 8080, true}, {"10.0.2.1", 80, true}} {
		if got := admits(t, res, pr.dst, pr.port); got != pr.want {
			t.Errorf("passed: %s:%d admitted %v, want %v; policy %v", pr.dst, pr.port, got, pr.want, res.Policy)
		}
	}
}

// TestConformancePriority ports "priority-50-example" and
// "old-priority-60-new-priority-40-example" (standard-priority-field.yaml),
// egress: a deny to slytherin at priority 50 wins over a pass at 60,
// and loses to it once the pass's priority becomes 40.
func TestConformancePriority(t *testing.T) {
	house := func(h string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"conformance-house": h}}
	}
	subj := npa.ClusterNetworkPolicySubject{Pods: &npa.NamespacedPod{NamespaceSelector: *house("gryffindor"), PodSelector: *house("gryffindor")}}
	to := []npa.ClusterNetworkPolicyEgressPeer{{Pods: &npa.NamespacedPod{NamespaceSelector: *house("slytherin"), PodSelector: *house("slytherin")}}}
	harry := pod("g", "harry-potter-0", "10.0.0.1", "conformance-house", "gryffindor")
	draco := pod("s", "draco-malfoy-0", "10.0.2.1", "conformance-house", "slytherin")
	c := &Cluster{
		Namespaces: map[string]*corev1.Namespace{"g": ns("g", "conformance-house", "gryffindor"), "s": ns("s", "conformance-house", "slytherin")},
		Pods:       []*corev1.Pod{harry, draco},
	}
	base := cnp("base", npa.BaselineTier, 1, subj, egress(Accept, to))
	for _, tc := range []struct {
		passPriority int32
		want         bool
	}{{60, false}, {40, true}} {
		c.Policies = []*npa.ClusterNetworkPolicy{
			cnp("priority-50-example", npa.AdminTier, 50, subj, egress(Deny, to)),
			cnp("old-priority-60-new-priority-40-example", npa.AdminTier, tc.passPriority, subj, egress(Pass, to)),
			base,
		}
		res, err := Compute(harry, c, defaults(conf.ModeAllowlist))
		if err != nil {
			t.Fatal(err)
		}
		if got := admits(t, res, "10.0.2.1", 80); got != tc.want {
			t.Errorf("pass at %d: admitted %v, want %v (%v)", tc.passPriority, got, tc.want, res.Policy)
		}
	}
}

func TestEgressPolicy(t *testing.T) {
	client := pod("team-a", "agent-0", "10.244.0.5", "app", "agent")
	namespaces := map[string]*corev1.Namespace{"team-a": ns("team-a")}
	grant := cnp("a", npa.AdminTier, 1, allNS, egress(Accept, domains("*.example.com", "api.anthropic.com"), tcp(443)))
	f := false
	ep := &v1alpha1.EgressPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "agents"},
		Spec: v1alpha1.EgressPolicySpec{
			PodSelector:  metav1.LabelSelector{MatchLabels: map[string]string{"app": "agent"}},
			AllowedHosts: []string{"api.anthropic.com", "www.example.com", "evil.example.org"},
			RuleSets:     []string{"closed-book"},
			ICMP:         &f,
			Inspect: []v1alpha1.InspectHost{{
				Host:  "api.anthropic.com",
				Deny:  []v1alpha1.Rule{{Method: []string{"POST"}, Path: "/v1/files"}},
				Allow: []v1alpha1.Rule{{Method: []string{"POST"}, Path: "/v1/messages"}},
				Inject: []v1alpha1.Inject{{Header: "x-api-key", Placeholder: "dm-placeholder",
					SecretKeyRef: v1alpha1.SecretKeyRef{Name: "anthropic", Key: "key"}}},
			}},
		}}
	other := ep.DeepCopy()
	other.Name, other.Namespace = "elsewhere", "team-b"
	other.Spec.AllowedHosts = []string{}
	d := defaults(conf.ModeAllowlist)
	d.AllowICMP = true
	c := &Cluster{Namespaces: namespaces, Policies: []*npa.ClusterNetworkPolicy{grant}, EgressPolicies: []*v1alpha1.EgressPolicy{ep, other},
		SecretFile: func(ns, name, key string) string { return "/run/doorman/agent/secrets/" + ns + "/" + name + "/" + key }}
	res, err := Compute(client, c, d)
	if err != nil {
		t.Fatal(err)
	}
	for _, pr := range []probe{{"api.anthropic.com", 443, true}, {"www.example.com", 443, true}, {"api.example.com", 443, false}, {"evil.example.org", 443, false}} {
		if got := admits(t, res, pr.dst, pr.port); got != pr.want {
			t.Errorf("%s:%d admitted %v, want %v; policy %v", pr.dst, pr.port, got, pr.want, res.Policy)
		}
	}
	if res.AllowICMP {
		t.Error("icmp: false left ICMP on")
	}
	if !slices.Equal(res.RuleSets, []string{"closed-book"}) {
		t.Errorf("rule sets %v", res.RuleSets)
	}
	if want := []conf.RuleSetUse{{Name: "closed-book", Action: conf.SetDeny}}; !slices.Equal(res.Policy.RuleSets, want) {
		t.Errorf("the policy's rule sets %v, want %v", res.Policy.RuleSets, want)
	}
	// Annotations that narrow keep the rule sets (they refuse, never
	// admit), and the installer's rule sets stay beside the policy's,
	// the stricter action kept.
	narrowed := client.DeepCopy()
	narrowed.Annotations = map[string]string{"doorman.io/allowed-hosts": "api.anthropic.com"}
	d2 := d
	d2.Policy = &conf.Policy{Mode: conf.ModeAllowlist, RuleSets: []conf.RuleSetUse{{Name: "closed-book", Action: conf.SetProbe}}}
	if res, err := Compute(narrowed, c, d2); err != nil || !slices.Equal(res.Policy.RuleSets, []conf.RuleSetUse{{Name: "closed-book", Action: conf.SetDeny}}) {
		t.Errorf("narrowed by annotations: rule sets %v, %v", res.Policy.RuleSets, err)
	}
	strip := ep.DeepCopy()
	strip.Spec.RuleSets = []string{"closed-book strip"}
	c.EgressPolicies = []*v1alpha1.EgressPolicy{strip}
	if res, err := Compute(client, c, d2); err != nil || !slices.Equal(res.Policy.RuleSets, []conf.RuleSetUse{{Name: "closed-book", Action: conf.SetStrip}}) {
		t.Errorf("strip over the installer's probe: rule sets %v, %v", res.Policy.RuleSets, err)
	}
	unknown := ep.DeepCopy()
	unknown.Spec.RuleSets = []string{"open-book"}
	c.EgressPolicies = []*v1alpha1.EgressPolicy{unknown}
	if res, err := Compute(client, c, d); err != nil || res.Policy.Mode != conf.ModeNone || len(res.Notes) == 0 {
		t.Errorf("an unknown rule set: %v, notes %v, %v", res.Policy, res.Notes, err)
	}
	c.EgressPolicies = []*v1alpha1.EgressPolicy{ep, other}
	h := res.Policy.InspectFor("api.anthropic.com")
	if h == nil || len(h.Deny) != 1 || len(h.Allow) != 1 || len(h.Inject) != 1 {
		t.Fatalf("request rules %+v", h)
	}
	if h.Inject[0].SecretFile != "/run/doorman/agent/secrets/team-a/anthropic/key" {
		t.Errorf("secret file %q", h.Inject[0].SecretFile)
	}

	// A pod the policy does not select keeps the grant.
	res, err = Compute(pod("team-a", "web-0", "10.244.0.6", "app", "web"), c, d)
	if err != nil {
		t.Fatal(err)
	}
	if !admits(t, res, "api.example.com", 443) || res.Policy.InspectFor("api.anthropic.com") != nil || !res.AllowICMP {
		t.Errorf("unselected pod: %v icmp %v", res.Policy, res.AllowICMP)
	}

	// An EgressPolicy that does not parse: mode none.
	bad := ep.DeepCopy()
	bad.Spec.AllowedHosts = []string{"*"}
	c.EgressPolicies = []*v1alpha1.EgressPolicy{bad}
	res, err = Compute(client, c, d)
	if err != nil {
		t.Fatal(err)
	}
	if res.Policy.Mode != conf.ModeNone || len(res.Notes) == 0 {
		t.Errorf("bad EgressPolicy: %v, notes %v", res.Policy, res.Notes)
	}
}

func TestBadAnnotationsRefuse(t *testing.T) {
	p := pod("team-a", "web-0", "10.244.0.5")
	p.Annotations = map[string]string{"doorman.io/mode": "permissive"}
	_, err := Compute(p, &Cluster{}, defaults(conf.ModeAllowlist))
	if err == nil || !strings.Contains(err.Error(), "doorman.io/mode") {
		t.Fatalf("err %v", err)
	}
}
