package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	npa "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/doorman-net/doorman/annotation"
	"github.com/doorman-net/doorman/conf"
	"github.com/doorman-net/doorman/kube/api/v1alpha1"
)

// AnnotationMode says what a pod's doorman.io/* annotations do.
type AnnotationMode string

const (
	// AnnotationsNarrow: they narrow what the cluster grants.
	AnnotationsNarrow AnnotationMode = "narrow"
	// AnnotationsReplace: they replace it (the meaning they had before
	// the agent; for single-tenant clusters).
	AnnotationsReplace AnnotationMode = "replace"
)

// ParseAnnotationMode parses "narrow" or "replace".
func ParseAnnotationMode(s string) (AnnotationMode, error) {
	switch m := AnnotationMode(s); m {
	case AnnotationsNarrow, AnnotationsReplace:
		return m, nil
	}
	return "", fmt.Errorf("%q: want narrow or replace", s)
}

// Kinds of the objects notes are about.
const (
	KindClusterNetworkPolicy = "ClusterNetworkPolicy"
	KindEgressPolicy         = "EgressPolicy"
	KindPod                  = "Pod"
)

// Ref names the object a Note is about.
type Ref struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

func (r Ref) String() string {
	if r.Namespace != "" {
		return r.Kind + " " + r.Namespace + "/" + r.Name
	}
	return r.Kind + " " + r.Name
}

// Note is something doorman could not express exactly, and how it erred
// closed, about one object.
type Note struct {
	Object  Ref    `json:"object"`
	Message string `json:"message"`
}

// Defaults are the node's: the installer's configuration.
type Defaults struct {
	// Policy is the installer's mode, allowedHosts and inspect: the last
	// tier, and the policy of pods no ClusterNetworkPolicy selects.
	Policy *conf.Policy
	// AllowDirect are the installer's allowDirect destinations: the
	// only ones a pod may reach without the proxy.
	AllowDirect []conf.Direct
	// AllowICMP is the installer's allowICMP.
	AllowICMP bool
	// ClusterDomain and ClusterPrefixes (serviceCIDRs and podCIDRs) are
	// the private ranges the proxy opens to names under the domain.
	ClusterDomain   string
	ClusterPrefixes []netip.Prefix
	// Annotations is what the pods' annotations do (default narrow).
	Annotations AnnotationMode
}

// Cluster is what the agent's caches hold.
type Cluster struct {
	// Namespaces by name.
	Namespaces map[string]*corev1.Namespace
	// Pods are the pods peers may select (every pod of the cluster, or
	// none when no policy has pod or namespace peers).
	Pods []*corev1.Pod
	// Nodes are the nodes nodes peers may select.
	Nodes []*corev1.Node
	// Policies are the ClusterNetworkPolicies.
	Policies []*npa.ClusterNetworkPolicy
	// EgressPolicies are doorman's objects (of every namespace).
	EgressPolicies []*v1alpha1.EgressPolicy
	// SecretFile is the node file the agent writes a Secret's key to,
	// for an inject rule's secretFile.
	SecretFile func(namespace, name, key string) string
}

// Result is a pod's effective policy.
type Result struct {
	// Policy is its mode, entries and request rules.
	Policy *conf.Policy `json:"policy"`
	// AllowDirect are the destinations it reaches without the proxy.
	AllowDirect []conf.Direct `json:"allowDirect,omitempty"`
	// AllowICMP lets small echo requests out to AllowDirect.
	AllowICMP bool `json:"allowICMP,omitempty"`
	// RuleSets are the named rule sets its EgressPolicies ask for.
	RuleSets []string `json:"ruleSets,omitempty"`
	// Sources are the objects that shaped it, in order.
	Sources []string `json:"sources,omitempty"`
	// Notes say what doorman could not express and how it erred closed.
	Notes []Note `json:"notes,omitempty"`
}

// Compute returns pod's effective policy. An error (annotations that do
// not parse) refuses the pod: it must not run with a policy it did not
// ask for.
func Compute(pod *corev1.Pod, c *Cluster, d Defaults) (*Result, error) {
	if d.Policy == nil {
		d.Policy = &conf.Policy{Mode: conf.ModeAllowlist}
	}
	res := &Result{}
	note := func(ref Ref, msg string) {
		n := Note{Object: ref, Message: msg}
		if !slices.Contains(res.Notes, n) {
			res.Notes = append(res.Notes, n)
		}
	}
	ns := c.Namespaces[pod.Namespace]
	idx := &peerIndex{namespaces: c.Namespaces, pods: c.Pods, nodes: c.Nodes}

	// The tiers: Admin, Baseline, then the installer's policy.
	var tiers [3][]*rule
	for t, tier := range []npa.Tier{npa.AdminTier, npa.BaselineTier} {
		for _, cnp := range ordered(c.Policies, tier) {
			ok, err := selectsPod(cnp, pod, ns)
			if !ok {
				continue
			}
			res.Sources = append(res.Sources, KindClusterNetworkPolicy+"/"+cnp.Name)
			tiers[t] = append(tiers[t], egressRules(cnp, idx, err, note)...)
		}
	}
	for _, cnp := range c.Policies {
		if cnp.Spec.Tier != npa.AdminTier && cnp.Spec.Tier != npa.BaselineTier {
			if ok, _ := selectsPod(cnp, pod, ns); ok {
				note(Ref{Kind: KindClusterNetworkPolicy, Name: cnp.Name}, fmt.Sprintf("unknown tier %q: its rules are not applied", cnp.Spec.Tier))
			}
		}
	}
	def := &rule{action: accept}
	if d.Policy.Mode == conf.ModeOpen {
		def.atoms = []atom{{all: true, lo: minPort, hi: maxPort, proto: pTCP, src: def}}
	} else if d.Policy.Mode == conf.ModeAllowlist {
		for _, e := range d.Policy.Entries {
			def.atoms = append(def.atoms, entryAtom(e, pTCP, def))
		}
	}
	direct := &rule{action: accept}
	for _, dd := range d.AllowDirect {
		direct.atoms = append(direct.atoms, entryAtom(dd.Entry(), pTCP|pUDP, direct))
	}
	tiers[2] = []*rule{def, direct}

	s := &subtractor{clusterDomain: d.ClusterDomain, clusterPrefixes: d.ClusterPrefixes}
	grants := evaluate(tiers, s, note)
	granted, allowDirect := toPolicy(grants, def, direct, note)
	selected := len(tiers[0])+len(tiers[1]) > 0
	if !selected {
		res.Sources = append(res.Sources, "installer")
		granted = &conf.Policy{Mode: d.Policy.Mode, Entries: d.Policy.Entries}
		allowDirect = slices.Clone(d.AllowDirect)
	} else if d.Policy.Mode == conf.ModeNone && len(granted.Entries) == 0 {
		granted = &conf.Policy{Mode: conf.ModeNone}
	}
	res.AllowICMP = d.AllowICMP
	inspect := slices.Clone(d.Policy.Inspect)
	sets := slices.Clone(d.Policy.RuleSets)

	// The namespace's EgressPolicies.
	eps := egressPoliciesFor(pod, ns, c.EgressPolicies)
	for _, ep := range eps {
		ref := Ref{Kind: KindEgressPolicy, Namespace: ep.Namespace, Name: ep.Name}
		res.Sources = append(res.Sources, KindEgressPolicy+"/"+ep.Namespace+"/"+ep.Name)
		narrowed, hosts, uses, err := applyEgressPolicy(ep, granted, c.SecretFile)
		if err != nil {
			// An EgressPolicy that does not read: nothing leaves.
			note(ref, fmt.Sprintf("does not parse, so the pods it selects get mode none: %v", oneLine(err)))
			granted, allowDirect, inspect, sets = conf.DenyAll(), nil, nil, nil
			res.AllowICMP = false
			break
		}
		granted = narrowed
		inspect = mergeInspect(inspect, hosts, ref, note)
		sets = mergeRuleSets(sets, uses)
		if ep.Spec.ICMP != nil && !*ep.Spec.ICMP {
			res.AllowICMP = false
		}
	}

	// The pod's annotations.
	podRef := Ref{Kind: KindPod, Namespace: pod.Namespace, Name: pod.Name}
	if err := annotation.CheckKnown(pod.Annotations); err != nil {
		return nil, err
	}
	asked, ok, err := annotation.Policy(pod.Annotations)
	if err != nil {
		return nil, err
	}
	askedDirect, err := annotation.Direct(pod.Annotations)
	if err != nil {
		return nil, err
	}
	switch {
	case d.Annotations == AnnotationsReplace:
		if ok {
			res.Sources = append(res.Sources, "annotations (replace)")
			granted = asked
		}
		allowDirect = append(allowDirect, askedDirect...)
	default:
		if ok {
			res.Sources = append(res.Sources, "annotations (narrow)")
			var dropped []string
			granted, dropped = annotation.Narrow(granted, asked)
			if len(dropped) > 0 {
				note(podRef, "annotation "+annotation.AllowedHosts+" asks for more than the cluster grants; not granted: "+strings.Join(dropped, ", "))
			}
		}
		if _, has := pod.Annotations[annotation.AllowDirect]; has {
			var kept []conf.Direct
			var dropped []string
			for _, a := range askedDirect {
				if e, ok := annotation.NarrowDirect(a, allowDirect); ok {
					kept = append(kept, e...)
				} else {
					dropped = append(dropped, a.String())
				}
			}
			allowDirect = kept
			if len(dropped) > 0 {
				note(podRef, "annotation "+annotation.AllowDirect+" asks for more than the cluster grants; not granted: "+strings.Join(dropped, ", "))
			}
		}
	}
	if len(inspect) > 0 && granted.Mode != conf.ModeNone {
		p, err := granted.WithInspect(inspect)
		if err != nil {
			return nil, fmt.Errorf("request rules: %w", err)
		}
		granted = p
	}
	// The rule sets of the installer and of every EgressPolicy: they
	// refuse requests to hosts the policy admits and admit none, so
	// whatever the annotations did they stay.
	if granted.Mode != conf.ModeNone {
		p, err := granted.WithRuleSets(sets)
		if err != nil {
			return nil, fmt.Errorf("rule sets: %w", err)
		}
		granted = p
		for _, u := range sets {
			res.RuleSets = append(res.RuleSets, u.String())
		}
	}
	res.Policy = granted
	res.AllowDirect = allowDirect
	return res, nil
}

// oneLine renders err on one line.
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

// entryAtom is an allowlist entry as an atom.
func entryAtom(e conf.Entry, p proto, r *rule) atom {
	a := atom{kind: e.Kind, name: e.Name, prefix: e.Prefix, lo: minPort, hi: maxPort, proto: p, src: r}
	if !e.Ports.Any() {
		a.lo, a.hi = e.Ports.Lo, e.Ports.Hi
	}
	return a
}

// blocker is traffic a Deny refuses to later tiers: its atom, except
// what a Pass before the Deny in its tier sent on.
type blocker struct {
	atom
	except []atom
}

// evaluate runs the tiers: what each Accept admits, less what an
// earlier Deny or Pass of its tier, or a Deny of an earlier tier, took.
func evaluate(tiers [3][]*rule, s *subtractor, note func(Ref, string)) []atom {
	var grants []atom
	var outer []blocker
	for _, tier := range tiers {
		var inner, passes []atom
		var denies []blocker
		for _, r := range tier {
			switch r.action {
			case accept:
				if len(r.atoms) > 0 && !slices.ContainsFunc(r.atoms, func(a atom) bool { return a.proto&pTCP != 0 }) && r.ref.Kind != "" {
					note(r.ref, fmt.Sprintf("%s: not admitted: doorman relays TCP only (DNS to the pod's resolvers is always allowed)", r))
				}
				blockers := slices.Clone(outer)
				for _, a := range inner {
					blockers = append(blockers, blocker{atom: a})
				}
				grants = append(grants, minus(r.atoms, blockers, s, note)...)
			case deny:
				for _, a := range r.atoms {
					denies = append(denies, blocker{atom: a, except: slices.Clone(passes)})
				}
				inner = append(inner, r.atoms...)
			case pass:
				inner = append(inner, r.atoms...)
				passes = append(passes, r.atoms...)
			}
		}
		outer = append(outer, denies...)
	}
	return grants
}

// minus subtracts every blocker from atoms, keeping the part certainly
// outside them, and notes what it cannot subtract exactly. a less (b
// except P) is (a less b) and what a, b and one of P share.
func minus(atoms []atom, blockers []blocker, s *subtractor, note func(Ref, string)) []atom {
	cur := atoms
	for _, b := range blockers {
		var next []atom
		for _, a := range cur {
			u, _, exact, why := s.subtract(a, b.atom)
			next = append(next, u...)
			back := false
			for _, p := range b.except {
				ab, ok := intersectAtoms(a, b.atom)
				if !ok {
					continue
				}
				if x, ok := intersectAtoms(ab, p); ok {
					x.src = a.src
					next = append(next, x)
					back = true
				}
			}
			if !exact && !back {
				note(a.src.ref, fmt.Sprintf("%s: %s is not admitted: it overlaps %s of %s, and %s", a.src, a, b.atom, b.src, why))
				if b.src.ref != a.src.ref && b.src.ref.Kind != "" {
					note(b.src.ref, fmt.Sprintf("%s: %s of %s is not admitted because of %s: %s", b.src, a, a.src, b.atom, why))
				}
			}
		}
		cur = next
	}
	return cur
}

// toPolicy turns the atoms granted into an allowlist (TCP) and
// allowDirect destinations (those of the installer's allowDirect left).
func toPolicy(grants []atom, def, direct *rule, note func(Ref, string)) (*conf.Policy, []conf.Direct) {
	p := &conf.Policy{Mode: conf.ModeAllowlist}
	var ds []conf.Direct
	for _, a := range grants {
		if a.src == direct {
			if a.proto&(pTCP|pUDP) == pTCP|pUDP {
				e := a.entry()
				ds = append(ds, conf.Direct{Prefix: e.Prefix, Ports: e.Ports})
			}
			continue
		}
		if a.proto&pTCP == 0 {
			continue
		}
		if a.all {
			if a.src == def && a.lo == minPort && a.hi == maxPort && len(grants) > 0 {
				p.Mode = conf.ModeOpen
				continue
			}
			note(a.src.ref, fmt.Sprintf("%s: %s is not admitted: doorman's mode open has no exceptions", a.src, a))
			continue
		}
		p.Entries = append(p.Entries, a.entry())
	}
	if p.Mode == conf.ModeOpen {
		p.Entries = nil
	}
	p.Entries = annotation.Tidy(p.Entries)
	return p, tidyDirect(ds)
}

func tidyDirect(ds []conf.Direct) []conf.Direct {
	es := make([]conf.Entry, len(ds))
	for i, d := range ds {
		es[i] = d.Entry()
	}
	var out []conf.Direct
	for _, e := range annotation.Tidy(es) {
		out = append(out, conf.Direct{Prefix: e.Prefix, Ports: e.Ports})
	}
	return out
}

// egressPoliciesFor are the EgressPolicies of pod's namespace that select
// it, by name. One whose selector does not parse selects it (its error
// then makes the pod's policy mode none).
func egressPoliciesFor(pod *corev1.Pod, ns *corev1.Namespace, all []*v1alpha1.EgressPolicy) []*v1alpha1.EgressPolicy {
	var out []*v1alpha1.EgressPolicy
	for _, ep := range all {
		if ep.Namespace != pod.Namespace {
			continue
		}
		if ok, err := matches(&ep.Spec.PodSelector, pod.Labels); ok || err != nil {
			out = append(out, ep)
		}
	}
	slices.SortFunc(out, func(a, b *v1alpha1.EgressPolicy) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// applyEgressPolicy narrows granted by ep's allowedHosts and returns its
// request rules and rule sets.
func applyEgressPolicy(ep *v1alpha1.EgressPolicy, granted *conf.Policy, secretFile func(ns, name, key string) string) (*conf.Policy, []conf.InspectHost, []conf.RuleSetUse, error) {
	if _, err := metav1.LabelSelectorAsSelector(&ep.Spec.PodSelector); err != nil {
		return nil, nil, nil, fmt.Errorf("podSelector: %w", err)
	}
	out := granted
	if ep.Spec.AllowedHosts != nil {
		asked, err := conf.NewPolicy(conf.ModeAllowlist, ep.Spec.AllowedHosts)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("allowedHosts: %w", err)
		}
		out, _ = annotation.Narrow(granted, asked)
	}
	hosts, err := InspectOf(ep, secretFile)
	if err != nil {
		return nil, nil, nil, err
	}
	uses, err := RuleSetsOf(ep)
	if err != nil {
		return nil, nil, nil, err
	}
	return out, hosts, uses, nil
}

// RuleSetsOf returns ep's rule sets: each "NAME" (its matches refused)
// or "NAME ACTION" (deny, strip or probe), as a policy file's ruleset
// line has them.
func RuleSetsOf(ep *v1alpha1.EgressPolicy) ([]conf.RuleSetUse, error) {
	var uses []conf.RuleSetUse
	for i, s := range ep.Spec.RuleSets {
		words := strings.Fields(s)
		if len(words) < 1 || len(words) > 2 {
			return nil, fmt.Errorf("ruleSets[%d] %q: want \"NAME\" or \"NAME deny|strip|probe\"", i, s)
		}
		u := conf.RuleSetUse{Name: words[0], Action: conf.SetDeny}
		if len(words) == 2 {
			u.Action = strings.ToLower(words[1])
		}
		if _, err := (&conf.Policy{}).WithRuleSets([]conf.RuleSetUse{u}); err != nil {
			return nil, fmt.Errorf("ruleSets[%d] %q: %w", i, s, err)
		}
		uses = mergeRuleSets(uses, []conf.RuleSetUse{u})
	}
	return uses, nil
}

// mergeRuleSets adds uses to cur; a set both use keeps the stricter
// action (deny, then strip, then probe).
func mergeRuleSets(cur, uses []conf.RuleSetUse) []conf.RuleSetUse {
	strict := map[string]int{conf.SetDeny: 3, conf.SetStrip: 2, conf.SetProbe: 1}
	out := slices.Clone(cur)
	for _, u := range uses {
		i := slices.IndexFunc(out, func(x conf.RuleSetUse) bool { return x.Name == u.Name })
		switch {
		case i < 0:
			out = append(out, u)
		case strict[u.Action] > strict[out[i].Action]:
			out[i].Action = u.Action
		}
	}
	return out
}

// InspectOf returns ep's request rules in doorman's form, each inject
// rule's secretFile the node file secretFile names for its Secret key.
func InspectOf(ep *v1alpha1.EgressPolicy, secretFile func(ns, name, key string) string) ([]conf.InspectHost, error) {
	if len(ep.Spec.Inspect) == 0 {
		return nil, nil
	}
	type inject struct {
		Header      string `json:"header"`
		Placeholder string `json:"placeholder"`
		SecretFile  string `json:"secretFile"`
	}
	type host struct {
		Deny    []v1alpha1.Rule `json:"deny,omitempty"`
		Allow   []v1alpha1.Rule `json:"allow,omitempty"`
		Default string          `json:"default,omitempty"`
		Inject  []inject        `json:"inject,omitempty"`
		MaxBody int64           `json:"maxBody,omitempty"`
	}
	m := map[string]host{}
	var errs []error
	for i, h := range ep.Spec.Inspect {
		if _, dup := m[h.Host]; dup {
			errs = append(errs, fmt.Errorf("inspect[%d]: host %q given twice", i, h.Host))
			continue
		}
		jh := host{Deny: h.Deny, Allow: h.Allow, Default: h.Default, MaxBody: h.MaxBody}
		for j, in := range h.Inject {
			if in.SecretKeyRef.Name == "" || in.SecretKeyRef.Key == "" {
				errs = append(errs, fmt.Errorf("inspect[%d].inject[%d].secretKeyRef: want a name and a key", i, j))
				continue
			}
			if secretFile == nil {
				errs = append(errs, fmt.Errorf("inspect[%d].inject[%d]: no place for secrets on this node", i, j))
				continue
			}
			jh.Inject = append(jh.Inject, inject{Header: in.Header, Placeholder: in.Placeholder,
				SecretFile: secretFile(ep.Namespace, in.SecretKeyRef.Name, in.SecretKeyRef.Key)})
		}
		m[h.Host] = jh
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	raw, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	return conf.ParseInspectJSON(raw)
}

// mergeInspect adds hosts to cur. A host both name is refused whatever
// its rules say beyond both lists of deny rules (default deny, no allow
// rules): doorman cannot intersect two sets of allow rules.
func mergeInspect(cur, hosts []conf.InspectHost, ref Ref, note func(Ref, string)) []conf.InspectHost {
	out := slices.Clone(cur)
	for _, h := range hosts {
		i := slices.IndexFunc(out, func(x conf.InspectHost) bool { return x.Host == h.Host })
		if i < 0 {
			out = append(out, h)
			continue
		}
		note(ref, fmt.Sprintf("inspect host %s also has request rules from another source: doorman cannot intersect two sets of allow rules, so it keeps both sets of deny rules and refuses every other request to it", h.Host))
		merged := conf.InspectHost{Host: h.Host, Deny: append(slices.Clone(out[i].Deny), h.Deny...), Default: conf.VerdictDeny,
			Inject: append(slices.Clone(out[i].Inject), h.Inject...), MaxBody: max(out[i].MaxBody, h.MaxBody)}
		out[i] = merged
	}
	return out
}
