package policy

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	npa "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/doorman-net/doorman/conf"
)

func ns(name string, labels ...string) *corev1.Namespace {
	l := map[string]string{corev1.LabelMetadataName: name}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l}}
}

func pod(namespace, name, ip string, labels ...string) *corev1.Pod {
	l := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: l}}
	if ip != "" {
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	return p
}

func nsSel(name string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: name}}
}

func cnp(name string, tier npa.Tier, prio int32, subject npa.ClusterNetworkPolicySubject, rules ...npa.ClusterNetworkPolicyEgressRule) *npa.ClusterNetworkPolicy {
	return &npa.ClusterNetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: npa.ClusterNetworkPolicySpec{Tier: tier, Priority: prio, Subject: subject, Egress: rules}}
}

func subjNS(name string) npa.ClusterNetworkPolicySubject {
	return npa.ClusterNetworkPolicySubject{Namespaces: nsSel(name)}
}

var allNS = npa.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{}}

func egress(action npa.ClusterNetworkPolicyRuleAction, to []npa.ClusterNetworkPolicyEgressPeer, protos ...npa.ClusterNetworkPolicyProtocol) npa.ClusterNetworkPolicyEgressRule {
	return npa.ClusterNetworkPolicyEgressRule{Action: action, To: to, Protocols: protos}
}

const (
	Accept = npa.ClusterNetworkPolicyRuleActionAccept
	Deny   = npa.ClusterNetworkPolicyRuleActionDeny
	Pass   = npa.ClusterNetworkPolicyRuleActionPass
)

func domains(names ...string) []npa.ClusterNetworkPolicyEgressPeer {
	var d []npa.DomainName
	for _, n := range names {
		d = append(d, npa.DomainName(n))
	}
	return []npa.ClusterNetworkPolicyEgressPeer{{DomainNames: d}}
}

func networks(cidrs ...string) []npa.ClusterNetworkPolicyEgressPeer {
	var d []npa.CIDR
	for _, n := range cidrs {
		d = append(d, npa.CIDR(n))
	}
	return []npa.ClusterNetworkPolicyEgressPeer{{Networks: d}}
}

func toNS(name string) []npa.ClusterNetworkPolicyEgressPeer {
	return []npa.ClusterNetworkPolicyEgressPeer{{Namespaces: nsSel(name)}}
}

func tcp(port int32) npa.ClusterNetworkPolicyProtocol {
	return npa.ClusterNetworkPolicyProtocol{TCP: &npa.ClusterNetworkPolicyProtocolTCP{DestinationPort: &npa.Port{Number: port}}}
}

func tcpRange(lo, hi int32) npa.ClusterNetworkPolicyProtocol {
	return npa.ClusterNetworkPolicyProtocol{TCP: &npa.ClusterNetworkPolicyProtocolTCP{DestinationPort: &npa.Port{Range: &npa.PortRange{Start: lo, End: hi}}}}
}

func udp(port int32) npa.ClusterNetworkPolicyProtocol {
	return npa.ClusterNetworkPolicyProtocol{UDP: &npa.ClusterNetworkPolicyProtocolUDP{DestinationPort: &npa.Port{Number: port}}}
}

// admits reports whether res admits a TCP connection to dst (a name or
// an address) on port.
func admits(t *testing.T, res *Result, dst string, port uint16) bool {
	t.Helper()
	p := res.Policy
	switch p.Mode {
	case conf.ModeNone:
		return false
	case conf.ModeOpen:
		return true
	}
	if a, err := netip.ParseAddr(dst); err == nil {
		_, ok := p.MatchAddr(a, port)
		return ok
	}
	_, ok := p.MatchName(dst, port)
	return ok
}

func defaults(mode conf.Mode, hosts ...string) Defaults {
	p, err := conf.NewPolicy(mode, hosts)
	if err != nil {
		panic(err)
	}
	return Defaults{Policy: p, Annotations: AnnotationsNarrow, ClusterDomain: "cluster.local",
		ClusterPrefixes: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}}
}
