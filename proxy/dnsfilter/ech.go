package dnsfilter

import "github.com/miekg/dns"

// stripECH removes the "ech" SvcParam (key 5) from every HTTPS and SVCB
// record of m, in every section, and "ech" from their "mandatory" lists (a
// record whose mandatory list names a key it lacks is malformed, and
// clients must skip it). It reports whether it changed anything.
func stripECH(m *dns.Msg) bool {
	changed := false
	for _, section := range [][]dns.RR{m.Answer, m.Ns, m.Extra} {
		for _, rr := range section {
			var s *dns.SVCB
			switch rr := rr.(type) {
			case *dns.HTTPS:
				s = &rr.SVCB
			case *dns.SVCB:
				s = rr
			default:
				continue
			}
			if stripECHParams(s) {
				changed = true
			}
		}
	}
	return changed
}

// stripECHParams removes the ech parameter from s, and ech from its
// mandatory list (the list goes if nothing else is left in it).
func stripECHParams(s *dns.SVCB) bool {
	changed := false
	kept := make([]dns.SVCBKeyValue, 0, len(s.Value))
	for _, kv := range s.Value {
		switch kv.Key() {
		case dns.SVCB_ECHCONFIG:
			changed = true
			continue
		case dns.SVCB_MANDATORY:
			m, ok := kv.(*dns.SVCBMandatory)
			if !ok {
				break
			}
			codes := make([]dns.SVCBKey, 0, len(m.Code))
			for _, k := range m.Code {
				if k != dns.SVCB_ECHCONFIG {
					codes = append(codes, k)
				}
			}
			if len(codes) == len(m.Code) {
				break
			}
			changed = true
			if len(codes) == 0 {
				continue
			}
			kv = &dns.SVCBMandatory{Code: codes}
		}
		kept = append(kept, kv)
	}
	if changed {
		s.Value = kept
	}
	return changed
}
