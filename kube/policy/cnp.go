package policy

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	npa "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/doorman-net/doorman/conf"
)

// action is what a rule does with the traffic it matches.
type action int

const (
	accept action = iota
	deny
	pass
)

func (a action) String() string {
	return [...]string{"Accept", "Deny", "Pass"}[a]
}

// rule is one egress rule, with the traffic it matches as atoms.
type rule struct {
	ref    Ref
	index  int    // the rule's index in its policy's egress list
	name   string // the rule's name, if any
	action action
	atoms  []atom
}

func (r *rule) String() string {
	if r.ref.Kind == "" {
		return "the installer's policy"
	}
	s := fmt.Sprintf("%s egress[%d]", r.ref, r.index)
	if r.name != "" {
		s += " (" + r.name + ")"
	}
	return s
}

// selectsPod reports whether the policy's subject selects pod (in
// namespace ns). A selector that does not parse selects it (see
// egressRules: its rules then fail closed).
func selectsPod(cnp *npa.ClusterNetworkPolicy, pod *corev1.Pod, ns *corev1.Namespace) (bool, error) {
	sub := cnp.Spec.Subject
	switch {
	case sub.Namespaces != nil:
		return matches(sub.Namespaces, nsLabels(ns))
	case sub.Pods != nil:
		ok, err := matches(&sub.Pods.NamespaceSelector, nsLabels(ns))
		if err != nil || !ok {
			return ok || err != nil, err
		}
		return matches(&sub.Pods.PodSelector, pod.Labels)
	}
	return true, fmt.Errorf("subject selects neither namespaces nor pods (a newer API than doorman's?)")
}

// matches reports whether sel selects objects with labels set; an error
// says why sel does not parse (and true is returned: fail closed).
func matches(sel *metav1.LabelSelector, set map[string]string) (bool, error) {
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return true, err
	}
	return s.Matches(labels.Set(set)), nil
}

func nsLabels(ns *corev1.Namespace) map[string]string {
	if ns == nil {
		return nil
	}
	// The API server sets kubernetes.io/metadata.name; a namespace from
	// a test or an older server may lack it.
	l := ns.Labels
	if _, ok := l[corev1.LabelMetadataName]; !ok {
		l = make(map[string]string, len(ns.Labels)+1)
		for k, v := range ns.Labels {
			l[k] = v
		}
		l[corev1.LabelMetadataName] = ns.Name
	}
	return l
}

// portProto is one protocol match of a rule.
type portProto struct {
	proto  proto
	lo, hi uint16
	named  string // destinationNamedPort
}

// protocols turns a rule's protocols into port matches (none: every
// protocol on every port).
func protocols(ps []npa.ClusterNetworkPolicyProtocol) []portProto {
	if len(ps) == 0 {
		return []portProto{{proto: pAll, lo: minPort, hi: maxPort}}
	}
	var out []portProto
	for _, p := range ps {
		var pr proto
		var port *npa.Port
		switch {
		case p.TCP != nil:
			pr, port = pTCP, p.TCP.DestinationPort
		case p.UDP != nil:
			pr, port = pUDP, p.UDP.DestinationPort
		case p.SCTP != nil:
			pr, port = pSCTP, p.SCTP.DestinationPort
		case p.DestinationNamedPort != "":
			out = append(out, portProto{named: p.DestinationNamedPort})
			continue
		default:
			// No field set: a newer API. Every protocol and port, so
			// that Accept matches more only through its peers... fail
			// closed is decided by the caller on the peers; here the
			// widest match makes Deny and Pass the widest.
			out = append(out, portProto{proto: pAll, lo: minPort, hi: maxPort})
			continue
		}
		pp := portProto{proto: pr, lo: minPort, hi: maxPort}
		if port != nil {
			switch {
			case port.Range != nil:
				pp.lo, pp.hi = clampPort(port.Range.Start), clampPort(port.Range.End)
			case port.Number != 0:
				pp.lo = clampPort(port.Number)
				pp.hi = pp.lo
			}
		}
		out = append(out, pp)
	}
	return out
}

func clampPort(n int32) uint16 {
	return uint16(min(max(n, minPort), maxPort))
}

// peerIndex is what the peers of rules select from.
type peerIndex struct {
	namespaces map[string]*corev1.Namespace
	pods       []*corev1.Pod
	nodes      []*corev1.Node
}

// egressRules turns a policy's egress rules into rules with atoms, and
// reports what it could not resolve in notes.
func egressRules(cnp *npa.ClusterNetworkPolicy, idx *peerIndex, subjectErr error, note func(Ref, string)) []*rule {
	ref := Ref{Kind: KindClusterNetworkPolicy, Name: cnp.Name}
	var out []*rule
	for i, er := range cnp.Spec.Egress {
		r := &rule{ref: ref, index: i, name: er.Name}
		switch er.Action {
		case npa.ClusterNetworkPolicyRuleActionAccept:
			r.action = accept
		case npa.ClusterNetworkPolicyRuleActionDeny:
			r.action = deny
		case npa.ClusterNetworkPolicyRuleActionPass:
			r.action = pass
		default:
			// An action doorman does not know: fail closed.
			note(ref, fmt.Sprintf("%s: unknown action %q: treated as Deny of everything", r, er.Action))
			r.action = deny
			r.atoms = []atom{{all: true, lo: minPort, hi: maxPort, proto: pAll, src: r}}
			out = append(out, r)
			continue
		}
		if subjectErr != nil {
			note(ref, fmt.Sprintf("%s: the subject's selector does not parse (%v): %s", r, subjectErr, failClosed(r.action)))
			r.atoms = closedAtoms(r)
			out = append(out, r)
			continue
		}
		pps := protocols(er.Protocols)
		for j, peer := range er.To {
			atoms, err := peerAtoms(peer, pps, idx, r)
			if err != nil {
				note(ref, fmt.Sprintf("%s: to[%d]: %v: %s", r, j, err, failClosed(r.action)))
				r.atoms = append(r.atoms, closedAtoms(r)...)
				continue
			}
			r.atoms = append(r.atoms, atoms...)
		}
		r.atoms = mergeAll(r.atoms, r)
		out = append(out, r)
	}
	return out
}

// failClosed says what doorman does with a rule it cannot read.
func failClosed(a action) string {
	if a == accept {
		return "the rule matches nothing"
	}
	return "the rule matches everything (" + a.String() + " of every destination)"
}

// closedAtoms are the atoms of a rule doorman cannot read, failing
// closed as the API asks: Accept matches nothing, Deny and Pass
// everything.
func closedAtoms(r *rule) []atom {
	if r.action == accept {
		return nil
	}
	return []atom{{all: true, lo: minPort, hi: maxPort, proto: pAll, src: r}}
}

// peerAtoms returns the atoms one peer of r selects on the ports pps.
func peerAtoms(peer npa.ClusterNetworkPolicyEgressPeer, pps []portProto, idx *peerIndex, r *rule) ([]atom, error) {
	var out []atom
	dest := func(base atom) {
		for _, pp := range pps {
			if pp.named != "" {
				continue // named ports select pods' ports: see podAtoms
			}
			a := base
			a.lo, a.hi, a.proto, a.src = pp.lo, pp.hi, pp.proto, r
			out = append(out, a)
		}
	}
	switch {
	case len(peer.DomainNames) > 0:
		for _, dn := range peer.DomainNames {
			e, err := conf.ParseEntry(string(dn))
			if err != nil || e.Kind == conf.KindPrefix || !e.Ports.Any() {
				return nil, fmt.Errorf("domain name %q is not a name doorman can match", dn)
			}
			dest(atom{kind: e.Kind, name: e.Name})
		}
	case len(peer.Networks) > 0:
		for _, n := range peer.Networks {
			p, err := netip.ParsePrefix(string(n))
			if err != nil {
				return nil, fmt.Errorf("network %q is not a CIDR", n)
			}
			dest(atom{kind: conf.KindPrefix, prefix: p.Masked()})
		}
	case peer.Nodes != nil:
		sel, err := metav1.LabelSelectorAsSelector(peer.Nodes)
		if err != nil {
			return nil, fmt.Errorf("nodes selector: %w", err)
		}
		for _, n := range idx.nodes {
			if !sel.Matches(labels.Set(n.Labels)) {
				continue
			}
			for _, a := range nodeAddrs(n) {
				dest(atom{kind: conf.KindPrefix, prefix: netip.PrefixFrom(a, a.BitLen())})
			}
		}
	case peer.Namespaces != nil:
		sel, err := metav1.LabelSelectorAsSelector(peer.Namespaces)
		if err != nil {
			return nil, fmt.Errorf("namespaces selector: %w", err)
		}
		for _, p := range idx.pods {
			if sel.Matches(labels.Set(nsLabels(idx.namespaces[p.Namespace]))) {
				out = append(out, podAtoms(p, pps, r)...)
			}
		}
	case peer.Pods != nil:
		nsSel, err := metav1.LabelSelectorAsSelector(&peer.Pods.NamespaceSelector)
		if err != nil {
			return nil, fmt.Errorf("pods.namespaceSelector: %w", err)
		}
		podSel, err := metav1.LabelSelectorAsSelector(&peer.Pods.PodSelector)
		if err != nil {
			return nil, fmt.Errorf("pods.podSelector: %w", err)
		}
		for _, p := range idx.pods {
			if nsSel.Matches(labels.Set(nsLabels(idx.namespaces[p.Namespace]))) && podSel.Matches(labels.Set(p.Labels)) {
				out = append(out, podAtoms(p, pps, r)...)
			}
		}
	default:
		return nil, fmt.Errorf("a peer with no field doorman knows (a newer API than doorman's?)")
	}
	return out, nil
}

// podAtoms are the atoms of a peer pod: its addresses on the ports pps,
// named ports resolved to that pod's container ports. Host-network pods
// and pods without addresses select nothing.
func podAtoms(p *corev1.Pod, pps []portProto, r *rule) []atom {
	if p.Spec.HostNetwork {
		return nil
	}
	var out []atom
	for _, a := range podAddrs(p) {
		base := atom{kind: conf.KindPrefix, prefix: netip.PrefixFrom(a, a.BitLen()), src: r}
		for _, pp := range pps {
			if pp.named == "" {
				x := base
				x.lo, x.hi, x.proto = pp.lo, pp.hi, pp.proto
				out = append(out, x)
				continue
			}
			for _, c := range p.Spec.Containers {
				for _, cp := range c.Ports {
					if cp.Name != pp.named || cp.ContainerPort < minPort || cp.ContainerPort > maxPort {
						continue
					}
					x := base
					x.lo = uint16(cp.ContainerPort)
					x.hi = x.lo
					switch cp.Protocol {
					case corev1.ProtocolUDP:
						x.proto = pUDP
					case corev1.ProtocolSCTP:
						x.proto = pSCTP
					default:
						x.proto = pTCP
					}
					out = append(out, x)
				}
			}
		}
	}
	return out
}

// podAddrs are a pod's addresses.
func podAddrs(p *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	if len(out) == 0 && p.Status.PodIP != "" {
		if a, err := netip.ParseAddr(p.Status.PodIP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// nodeAddrs are a node's IP addresses (InternalIP and ExternalIP).
func nodeAddrs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP && a.Type != corev1.NodeExternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil && !slices.Contains(out, ip.Unmap()) {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// mergeAll turns a rule's addresses that together cover both families'
// whole space on the same ports into one atom for every destination: a
// Deny of 0.0.0.0/0 and ::/0 denies names too, wherever they resolve.
func mergeAll(atoms []atom, r *rule) []atom {
	type key struct {
		lo, hi uint16
		proto  proto
	}
	v4, v6 := map[key]bool{}, map[key]bool{}
	for _, a := range atoms {
		if a.all || a.kind != conf.KindPrefix || a.prefix.Bits() != 0 {
			continue
		}
		k := key{a.lo, a.hi, a.proto}
		if a.prefix.Addr().Is4() {
			v4[k] = true
		} else {
			v6[k] = true
		}
	}
	var out []atom
	done := map[key]bool{}
	for _, a := range atoms {
		k := key{a.lo, a.hi, a.proto}
		if !a.all && a.kind == conf.KindPrefix && a.prefix.Bits() == 0 && v4[k] && v6[k] {
			if !done[k] {
				done[k] = true
				out = append(out, atom{all: true, lo: a.lo, hi: a.hi, proto: a.proto, src: r})
			}
			continue
		}
		out = append(out, a)
	}
	return out
}

// ordered returns the policies of tier sorted by priority (lower first),
// then by name: the API leaves the order of equal priorities to the
// implementation, and doorman's is the name's.
func ordered(cnps []*npa.ClusterNetworkPolicy, tier npa.Tier) []*npa.ClusterNetworkPolicy {
	var out []*npa.ClusterNetworkPolicy
	for _, c := range cnps {
		if c.Spec.Tier == tier {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(a, b *npa.ClusterNetworkPolicy) int {
		return cmp.Or(cmp.Compare(a.Spec.Priority, b.Spec.Priority), cmp.Compare(a.Name, b.Name))
	})
	return out
}
