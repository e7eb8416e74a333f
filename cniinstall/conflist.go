package cniinstall

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// conflist is a network configuration list as bytes, with where in them its
// plugin list and each plugin lie. Edits splice bytes at those places and
// leave every other byte as it was.
type conflist struct {
	data []byte
	// list is the plugins array, from its '[' to just after its ']'.
	list span
	// plugins are the array's elements, in order.
	plugins []plugin
}

// span is a byte range [start, end) of a file.
type span struct{ start, end int }

// plugin is one element of the plugins array.
type plugin struct {
	span
	typ string
}

// parseConflist finds the plugins array of a conflist and its elements. It
// refuses what it cannot edit without guessing: a top level that is not an
// object, a "plugins" key given twice or not an array, an element without
// a string type.
func parseConflist(data []byte) (*conflist, error) {
	c := &conflist{data: data}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("not a JSON object")
	}
	found := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		if key != "plugins" {
			continue
		}
		if found {
			return nil, errors.New(`"plugins" appears twice`)
		}
		found = true
		end := int(dec.InputOffset())
		start := end - len(raw)
		if start < 0 || !bytes.Equal(data[start:end], raw) || raw[0] != '[' {
			return nil, errors.New(`"plugins" is not an array`)
		}
		c.list = span{start, end}
		if c.plugins, err = parsePlugins(raw, start); err != nil {
			return nil, err
		}
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errors.New("not a JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("data after the top-level object")
	}
	if !found {
		return nil, errors.New(`no "plugins" list`)
	}
	return c, nil
}

// parsePlugins finds the elements of the plugins array raw, which starts
// at offset base of the file.
func parsePlugins(raw []byte, base int) ([]plugin, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var out []plugin
	for i := 0; dec.More(); i++ {
		var el json.RawMessage
		if err := dec.Decode(&el); err != nil {
			return nil, err
		}
		end := int(dec.InputOffset())
		start := end - len(el)
		if start < 0 || !bytes.Equal(raw[start:end], el) {
			return nil, fmt.Errorf("plugins[%d]: cannot locate it in the file", i)
		}
		var t struct {
			Type string `json:"type"`
		}
		if el[0] != '{' || json.Unmarshal(el, &t) != nil {
			return nil, fmt.Errorf("plugins[%d]: not an object with a string type", i)
		}
		out = append(out, plugin{span{base + start, base + end}, t.Type})
	}
	return out, nil
}

// doorman returns the indexes of doorman's entries.
func (c *conflist) doorman() []int {
	var out []int
	for i, p := range c.plugins {
		if p.typ == PluginType {
			out = append(out, i)
		}
	}
	return out
}

// splice returns the file with s replaced by text.
func (c *conflist) splice(s span, text []byte) []byte {
	out := make([]byte, 0, len(c.data)-(s.end-s.start)+len(text))
	out = append(out, c.data[:s.start]...)
	out = append(out, text...)
	return append(out, c.data[s.end:]...)
}

// style is how a plugin is laid out, for an entry written beside it.
type style struct {
	// prefix is the whitespace that begins the plugin's first line.
	prefix string
	// indent is one level of indentation inside it; empty when the
	// plugin is on one line.
	indent string
}

// styleOf reads the layout of the plugin at s: the leading whitespace of
// the line it starts on, and whether and by how much its second line is
// indented further. An entry rendered in the style of the element it
// replaces has that same style, so a second edit changes nothing.
func (c *conflist) styleOf(s span) style {
	st := style{prefix: linePrefix(c.data[:s.start])}
	el := c.data[s.start:s.end]
	nl := bytes.IndexByte(el, '\n')
	if nl < 0 {
		return st
	}
	second := el[nl+1:]
	ws := string(second[:len(second)-len(bytes.TrimLeft(second, " \t"))])
	switch {
	case len(ws) > len(st.prefix) && ws[:len(st.prefix)] == st.prefix:
		st.indent = ws[len(st.prefix):]
	case strings.Contains(st.prefix, "\t"):
		st.indent = "\t"
	default:
		st.indent = "  "
	}
	return st
}

// linePrefix is the leading whitespace of the last line of b.
func linePrefix(b []byte) string {
	line := b[bytes.LastIndexByte(b, '\n')+1:]
	return string(line[:len(line)-len(bytes.TrimLeft(line, " \t"))])
}

// render renders doorman's entry for cfg in style st.
func (st style) render(cfg *Config) []byte {
	return cfg.Entry(st.prefix, st.indent)
}

// withEntry returns the file with exactly one doorman entry for cfg: an
// existing one is replaced where it stands (and any others removed), or
// one is appended after the last plugin, separated from it as that plugin
// is from the one before it and laid out like it. A file that already has
// exactly that entry comes back unchanged, byte for byte. A list of
// nothing but doorman entries is refused: there is no interface plugin
// for doorman to follow.
func withEntry(data []byte, cfg *Config) ([]byte, error) {
	c, err := parseConflist(data)
	if err != nil {
		return nil, err
	}
	idx := c.doorman()
	if len(idx) == 0 {
		return c.appendEntry(cfg), nil
	}
	if len(idx) == len(c.plugins) {
		return nil, errors.New("no plugin but doorman: doorman must be chained after an interface plugin")
	}
	// Extra entries go first, from the last, so that the first one's
	// place does not move.
	for j := len(idx) - 1; j >= 1; j-- {
		if data, err = c.remove(idx[j]); err != nil {
			return nil, err
		}
		if c, err = parseConflist(data); err != nil {
			return nil, err
		}
	}
	p := c.plugins[idx[0]].span
	text := c.styleOf(p).render(cfg)
	if bytes.Equal(c.data[p.start:p.end], text) {
		return c.data, nil
	}
	return c.splice(p, text), nil
}

// appendEntry returns the file with doorman's entry after its last plugin.
func (c *conflist) appendEntry(cfg *Config) []byte {
	var gap []byte
	var st style
	switch n := len(c.plugins); n {
	case 0:
		// An empty list (libcni refuses it, so no runtime uses such a
		// file): the entry becomes its only element.
		inner := span{c.list.start + 1, c.list.end - 1}
		return c.splice(inner, style{}.render(cfg))
	case 1:
		gap = append([]byte{','}, c.data[c.list.start+1:c.plugins[0].start]...)
		st = c.styleOf(c.plugins[0].span)
	default:
		gap = c.data[c.plugins[n-2].end:c.plugins[n-1].start]
		st = c.styleOf(c.plugins[n-1].span)
	}
	// The entry is laid out like the last plugin, from the start of the
	// line it lands on.
	last := c.plugins[len(c.plugins)-1].end
	st.prefix = linePrefix(append(append([]byte{}, c.data[:last]...), gap...))
	text := append(append([]byte{}, gap...), st.render(cfg)...)
	return c.splice(span{last, last}, text)
}

// remove returns the file without plugin i and the separator before it (or
// after it, for the first), so that removing what appendEntry appended
// gives back the file as it was.
func (c *conflist) remove(i int) ([]byte, error) {
	switch {
	case len(c.plugins) == 1:
		return nil, errors.New("doorman's entry is its only plugin")
	case i > 0:
		return c.splice(span{c.plugins[i-1].end, c.plugins[i].end}, nil), nil
	default:
		return c.splice(span{c.plugins[0].start, c.plugins[1].start}, nil), nil
	}
}

// withoutEntry returns the file without any doorman entry.
func withoutEntry(data []byte) ([]byte, error) {
	for {
		c, err := parseConflist(data)
		if err != nil {
			return nil, err
		}
		idx := c.doorman()
		if len(idx) == 0 {
			return data, nil
		}
		if data, err = c.remove(idx[len(idx)-1]); err != nil {
			return nil, err
		}
	}
}

// hasEntry reports whether the conflist has a doorman entry.
func hasEntry(data []byte) bool {
	c, err := parseConflist(data)
	return err == nil && len(c.doorman()) > 0
}

// convertConf turns a single-plugin network configuration (.conf, .json)
// into the conflist libcni.ConfListFromConf makes of it: the conf's
// cniVersion (if it has one) and name, and the conf itself as the only
// plugin, re-indented.
func convertConf(data []byte) ([]byte, error) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil || m == nil {
		return nil, errors.New("not a JSON object")
	}
	var b bytes.Buffer
	b.WriteString("{\n")
	if v, ok := m["cniVersion"]; ok {
		b.WriteString(`  "cniVersion": `)
		json.Compact(&b, v)
		b.WriteString(",\n")
	}
	b.WriteString(`  "name": `)
	if v, ok := m["name"]; ok {
		json.Compact(&b, v)
	} else {
		b.WriteString(`""`)
	}
	b.WriteString(",\n  \"plugins\": [\n    ")
	if err := json.Indent(&b, bytes.TrimSpace(data), "    ", "  "); err != nil {
		return nil, err
	}
	b.WriteString("\n  ]\n}\n")
	return b.Bytes(), nil
}
