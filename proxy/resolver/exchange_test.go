package resolver

import (
	"strings"
	"testing"

	"github.com/miekg/dns"
)

func TestCheckReply(t *testing.T) {
	t.Parallel()
	query := new(dns.Msg)
	query.SetQuestion("Api.Example.com.", dns.TypeA)
	reply := func(edit func(m *dns.Msg)) *dns.Msg {
		m := new(dns.Msg)
		m.SetReply(query)
		edit(m)
		return m
	}
	for _, tc := range []struct {
		what  string
		reply *dns.Msg
		err   string
	}{
		{"matching", reply(func(m *dns.Msg) {}), ""},
		{"name in another case", reply(func(m *dns.Msg) { m.Question[0].Name = "aPI.exAMPLE.COM." }), ""},
		{"another ID", reply(func(m *dns.Msg) { m.Id++ }), "answer has ID"},
		{"not a response", reply(func(m *dns.Msg) { m.Response = false }), "not a response"},
		{"another opcode", reply(func(m *dns.Msg) { m.Opcode = dns.OpcodeStatus }), "opcode STATUS"},
		{"no question", reply(func(m *dns.Msg) { m.Question = nil }), "0 questions"},
		{"two questions", reply(func(m *dns.Msg) { m.Question = append(m.Question, m.Question[0]) }), "2 questions"},
		{"another name", reply(func(m *dns.Msg) { m.Question[0].Name = "evil.test." }), "answer is for evil.test. IN A"},
		{"another type", reply(func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeTXT }), "IN TXT, not the question"},
		{"another class", reply(func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }), "CH A, not the question"},
	} {
		err := checkReply(query, tc.reply)
		if (err == nil) != (tc.err == "") || err != nil && !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: checkReply = %v, want %q", tc.what, err, tc.err)
		}
	}
}
