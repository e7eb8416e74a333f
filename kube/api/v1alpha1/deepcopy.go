package v1alpha1

import (
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/runtime"
)

// DeepCopyInto copies p into out.
func (p *EgressPolicy) DeepCopyInto(out *EgressPolicy) {
	*out = *p
	out.TypeMeta = p.TypeMeta
	p.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	p.Spec.DeepCopyInto(&out.Spec)
}

// DeepCopy returns a copy of p.
func (p *EgressPolicy) DeepCopy() *EgressPolicy {
	if p == nil {
		return nil
	}
	out := new(EgressPolicy)
	p.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (p *EgressPolicy) DeepCopyObject() runtime.Object { return p.DeepCopy() }

// DeepCopyInto copies l into out.
func (l *EgressPolicyList) DeepCopyInto(out *EgressPolicyList) {
	*out = *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]EgressPolicy, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
}

// DeepCopy returns a copy of l.
func (l *EgressPolicyList) DeepCopy() *EgressPolicyList {
	if l == nil {
		return nil
	}
	out := new(EgressPolicyList)
	l.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (l *EgressPolicyList) DeepCopyObject() runtime.Object { return l.DeepCopy() }

// DeepCopyInto copies s into out.
func (s *EgressPolicySpec) DeepCopyInto(out *EgressPolicySpec) {
	*out = *s
	s.PodSelector.DeepCopyInto(&out.PodSelector)
	out.AllowedHosts = slices.Clone(s.AllowedHosts)
	out.RuleSets = slices.Clone(s.RuleSets)
	if s.ICMP != nil {
		v := *s.ICMP
		out.ICMP = &v
	}
	if s.Inspect != nil {
		out.Inspect = make([]InspectHost, len(s.Inspect))
		for i := range s.Inspect {
			s.Inspect[i].DeepCopyInto(&out.Inspect[i])
		}
	}
}

// DeepCopyInto copies h into out.
func (h *InspectHost) DeepCopyInto(out *InspectHost) {
	*out = *h
	out.Deny = copyRules(h.Deny)
	out.Allow = copyRules(h.Allow)
	out.Inject = slices.Clone(h.Inject)
}

func copyRules(rs []Rule) []Rule {
	if rs == nil {
		return nil
	}
	out := make([]Rule, len(rs))
	for i, r := range rs {
		out[i] = Rule{
			Method: slices.Clone(r.Method), Path: r.Path,
			Query: maps.Clone(r.Query), Header: maps.Clone(r.Header), JSON: maps.Clone(r.JSON),
		}
	}
	return out
}
