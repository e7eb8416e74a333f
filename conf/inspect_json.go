package conf

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/doorman-net/doorman/internal/strictjson"
)

// The JSON form of request rules, the value of a policy's "inspect" key
// (in a conflist, the doorman.io/inspect annotation or label, and the
// JSON a policy renders as):
//
//	{"api.example.com": {
//	    "deny":   [{"method": "POST", "path": "/v1/messages", "json": {"tools[].type": "web_search*"}}],
//	    "allow":  [{"method": ["GET", "HEAD"]}, {"path": "/myorg/*"}],
//	    "default": "deny",
//	    "inject": [{"header": "x-api-key", "placeholder": "dm-placeholder", "secretFile": "/etc/doorman/secrets/x"}],
//	    "maxBody": 1048576}}
//
// A rule's keys are method (a string or a list), path, query, header and
// json (objects from key to glob). Unknown keys are errors at every
// level: a misspelt "methods" must not become a rule that matches every
// request. "placeholderSHA256" (64 hex digits) may stand for "placeholder";
// doorman writes only it.

// jsonInspectHost is one host's rules in JSON.
type jsonInspectHost struct {
	Deny    []jsonRule   `json:"deny,omitempty"`
	Allow   []jsonRule   `json:"allow,omitempty"`
	Default string       `json:"default,omitempty"`
	Inject  []jsonInject `json:"inject,omitempty"`
	MaxBody int64        `json:"maxBody,omitempty"`
}

type jsonRule struct {
	Method stringOrList      `json:"method,omitempty"`
	Path   string            `json:"path,omitempty"`
	Query  map[string]string `json:"query,omitempty"`
	Header map[string]string `json:"header,omitempty"`
	JSON   map[string]string `json:"json,omitempty"`
}

type jsonInject struct {
	Header            string `json:"header"`
	Placeholder       string `json:"placeholder,omitempty"`
	PlaceholderSHA256 string `json:"placeholderSHA256,omitempty"`
	SecretFile        string `json:"secretFile"`
}

// stringOrList is a JSON string or list of strings.
type stringOrList []string

func (s *stringOrList) UnmarshalJSON(data []byte) error {
	var one string
	if err := json.Unmarshal(data, &one); err == nil {
		*s = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(data, &many); err != nil {
		return errors.New("want a method or a list of methods")
	}
	*s = many
	return nil
}

func (s stringOrList) MarshalJSON() ([]byte, error) {
	if len(s) == 1 {
		return json.Marshal(s[0])
	}
	return json.Marshal([]string(s))
}

// ParseInspectJSON parses the JSON form of request rules: an object from
// host to its rules. Every error is reported, each naming the host and the
// rule.
func ParseInspectJSON(data []byte) ([]InspectHost, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw == nil {
		return nil, fmt.Errorf("inspect %s: want an object from each inspected host to its rules", strictjson.Compact(data))
	}
	if _, ok := raw[ruleSetsKey]; ok {
		return nil, errors.New("inspect: rulesets: rule sets are not read from this configuration yet (name them in the policy file: \"ruleset NAME\", or in a conflist's inspect key)")
	}
	return parseInspectHosts(raw)
}

// parseInspectHosts parses the hosts' rules of the JSON form, already
// decoded into each host's raw rules (ParseInspectJSON,
// ParseInspectRules).
func parseInspectHosts(raw map[string]json.RawMessage) ([]InspectHost, error) {
	var errs []error
	var hosts []InspectHost
	keys := make([]string, 0, len(raw))
	for k := range raw {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		host, err := normalizeInspectHost(k)
		if err != nil {
			errs = append(errs, fmt.Errorf("inspect: %w", err))
			continue
		}
		var jh jsonInspectHost
		if err := strictjson.Decode("", raw[k], &jh); err != nil {
			errs = append(errs, inspectDecodeErrors(host, err)...)
			continue
		}
		h, err := jh.host(host)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		hosts = append(hosts, h)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	hosts, err := setInspect(hosts)
	if err != nil {
		return nil, err
	}
	return hosts, nil
}

// inspectDecodeErrors are the errors of decoding host's rules, each
// naming where in them (deny[0].method) the bad value is.
func inspectDecodeErrors(host string, err error) []error {
	var out []error
	for _, e := range unjoin(err) {
		var se *strictjson.Error
		if errors.As(e, &se) {
			reason := se.Why
			if se.Value != "" {
				reason = se.Value + ": " + se.Why
			}
			out = append(out, &InspectError{Host: host, Where: se.Path, Reason: reason})
			continue
		}
		out = append(out, &InspectError{Host: host, Reason: e.Error()})
	}
	return out
}

// unjoin returns the errors errors.Join joined into err, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// InspectJSONKeys are the keys of one host's rules in the JSON form, by
// their paths below the host ("deny", "deny[].method", "inject[].secretFile"):
// for tools and tests that go through every key.
func InspectJSONKeys() []string {
	var out []string
	rule, inject := strictjson.Keys(jsonRule{}), strictjson.Keys(jsonInject{})
	for _, k := range strictjson.Keys(jsonInspectHost{}) {
		out = append(out, k)
		switch k {
		case VerdictDeny, VerdictAllow:
			for _, r := range rule {
				out = append(out, k+"[]."+r)
			}
		case "inject":
			for _, i := range inject {
				out = append(out, k+"[]."+i)
			}
		}
	}
	return out
}

func (jh jsonInspectHost) host(name string) (InspectHost, error) {
	h := InspectHost{Host: name, Default: strings.ToLower(jh.Default), MaxBody: jh.MaxBody}
	if jh.MaxBody < 0 {
		return h, &InspectError{Host: name, Where: "maxBody", Reason: fmt.Sprintf("%d: want a positive number of bytes", jh.MaxBody)}
	}
	var errs []error
	rules := func(list []jsonRule, verb string) []Rule {
		var out []Rule
		for i, jr := range list {
			r, err := jr.rule()
			if err != nil {
				errs = append(errs, &InspectError{Host: name, Where: fmt.Sprintf("%s[%d]", verb, i), Reason: err.Error()})
				continue
			}
			out = append(out, r)
		}
		return out
	}
	h.Deny = rules(jh.Deny, VerdictDeny)
	h.Allow = rules(jh.Allow, VerdictAllow)
	for i, ji := range jh.Inject {
		where := fmt.Sprintf("inject[%d]", i)
		var sum [32]byte
		var err error
		switch {
		case ji.Placeholder != "" && ji.PlaceholderSHA256 != "":
			err = errors.New("give placeholder or placeholderSHA256, not both")
		case ji.PlaceholderSHA256 != "":
			where += ".placeholderSHA256"
			if sum, err = parsePlaceholder("sha256:" + ji.PlaceholderSHA256); err != nil {
				err = fmt.Errorf("%q: want 64 hex digits", ji.PlaceholderSHA256)
			}
		default:
			where += ".placeholder"
			sum, err = parsePlaceholder(ji.Placeholder)
		}
		if err != nil {
			errs = append(errs, &InspectError{Host: name, Where: where, Reason: err.Error()})
			continue
		}
		h.Inject = append(h.Inject, Inject{Header: ji.Header, PlaceholderSHA256: sum, SecretFile: ji.SecretFile})
	}
	if len(errs) > 0 {
		return h, errors.Join(errs...)
	}
	return h, nil
}

func (jr jsonRule) rule() (Rule, error) {
	r := Rule{Methods: slices.Clone([]string(jr.Method)), Path: jr.Path}
	for k, v := range jr.Query {
		r.Query = append(r.Query, Cond{Key: k, Glob: v})
	}
	for k, v := range jr.Header {
		r.Header = append(r.Header, Cond{Key: k, Glob: v})
	}
	for k, v := range jr.JSON {
		p, err := ParseJSONPath(k)
		if err != nil {
			return r, fmt.Errorf("json: %w", err)
		}
		r.JSON = append(r.JSON, JSONCond{Path: p, Glob: v})
	}
	return r, r.normalize()
}

// inspectJSON renders hosts in the JSON form, placeholders as their
// SHA-256.
func inspectJSON(hosts []InspectHost) map[string]jsonInspectHost {
	if len(hosts) == 0 {
		return nil
	}
	out := make(map[string]jsonInspectHost, len(hosts))
	for _, h := range hosts {
		jh := jsonInspectHost{Default: h.Default, MaxBody: h.MaxBody}
		for _, r := range h.Deny {
			jh.Deny = append(jh.Deny, ruleJSON(r))
		}
		for _, r := range h.Allow {
			jh.Allow = append(jh.Allow, ruleJSON(r))
		}
		for _, in := range h.Inject {
			jh.Inject = append(jh.Inject, jsonInject{Header: in.Header, PlaceholderSHA256: hex.EncodeToString(in.PlaceholderSHA256[:]), SecretFile: in.SecretFile})
		}
		out[h.Host] = jh
	}
	return out
}

func ruleJSON(r Rule) jsonRule {
	jr := jsonRule{Method: stringOrList(r.Methods), Path: r.Path}
	conds := func(cs []Cond) map[string]string {
		if len(cs) == 0 {
			return nil
		}
		m := make(map[string]string, len(cs))
		for _, c := range cs {
			m[c.Key] = c.Glob
		}
		return m
	}
	jr.Query, jr.Header = conds(r.Query), conds(r.Header)
	if len(r.JSON) > 0 {
		jr.JSON = make(map[string]string, len(r.JSON))
		for _, j := range r.JSON {
			jr.JSON[j.Path.String()] = j.Glob
		}
	}
	return jr
}
