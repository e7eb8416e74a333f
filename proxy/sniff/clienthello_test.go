package sniff

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"golang.org/x/crypto/cryptobyte"
)

// handshakeBytes returns the handshake message carried by the records at
// the start of data (test helper: trusts its input).
func handshakeBytes(t testing.TB, data []byte) []byte {
	t.Helper()
	var msg []byte
	for len(data) >= recordHeaderLen {
		n := int(data[3])<<8 | int(data[4])
		msg = append(msg, data[recordHeaderLen:recordHeaderLen+n]...)
		data = data[recordHeaderLen+n:]
		if len(msg) >= 4 && len(msg) == 4+(int(msg[1])<<16|int(msg[2])<<8|int(msg[3])) {
			return msg
		}
	}
	t.Fatalf("no complete handshake message")
	return nil
}

// records cuts msg into handshake records; size(i) is the payload size of
// record i (capped by what is left).
func records(msg []byte, size func(i int) int) []byte {
	var out []byte
	for i := 0; len(msg) > 0; i++ {
		n := min(size(i), len(msg))
		out = append(out, recordTypeHandshake, 3, 1, byte(n>>8), byte(n))
		out = append(out, msg[:n]...)
		msg = msg[n:]
	}
	return out
}

// resplit re-cuts the hello at the start of data into records of size(i).
func resplit(t testing.TB, data []byte, size func(i int) int) []byte {
	return records(handshakeBytes(t, data), size)
}

// splits are the record cuttings every golden hello is tested with.
func splits() map[string]func(int) int {
	rnd := rand.New(rand.NewPCG(1, 2))
	randSizes := make([]int, 0, 4096)
	for range cap(randSizes) {
		randSizes = append(randSizes, 1+rnd.IntN(300))
	}
	return map[string]func(int) int{
		"one-record":    func(int) int { return maxRecordPayload },
		"1-byte":        func(int) int { return 1 },
		"2-bytes":       func(int) int { return 2 },
		"3-bytes":       func(int) int { return 3 },
		"7-bytes":       func(int) int { return 7 },
		"header-apart":  func(i int) int { return [...]int{4, maxRecordPayload}[min(i, 1)] },
		"header-split":  func(i int) int { return [...]int{1, 2, 1, maxRecordPayload}[min(i, 3)] },
		"random":        func(i int) int { return randSizes[i%len(randSizes)] },
		"1460-and-rest": func(i int) int { return [...]int{1460, maxRecordPayload}[min(i, 1)] },
	}
}

func TestServerNameGolden(t *testing.T) {
	for _, h := range goldenHellos(t) {
		t.Run(h.name, func(t *testing.T) {
			got, err := ServerName(h.data)
			if err != nil || got != h.want {
				t.Fatalf("ServerName = %q, %v; want %q", got, err, h.want)
			}
			ch, err := ParseClientHello(h.data)
			if err != nil || ch.ECH {
				t.Fatalf("ParseClientHello = %+v, %v; want no ECH", ch, err)
			}
		})
	}
}

func TestServerNameResplit(t *testing.T) {
	for _, h := range goldenHellos(t) {
		for split, size := range splits() {
			t.Run(h.name+"/"+split, func(t *testing.T) {
				data := resplit(t, h.data, size)
				got, err := ServerName(data)
				if err != nil || got != h.want {
					t.Fatalf("ServerName(%d bytes) = %q, %v; want %q", len(data), got, err, h.want)
				}
				// What follows the hello is not looked at: a
				// ChangeCipherSpec, early data, garbage.
				more := append(append([]byte{}, data...), 0x14, 3, 3, 0, 1, 1, 0x17, 3, 3, 0xff, 0xff, 0)
				if got, err := ServerName(more); err != nil || got != h.want {
					t.Fatalf("with bytes after the hello: %q, %v", got, err)
				}
			})
		}
	}
}

// TestServerNameMatchesCryptoTLS checks that Go's own TLS server reads the
// same name from every golden hello, however it is cut into records.
func TestServerNameMatchesCryptoTLS(t *testing.T) {
	for _, h := range goldenHellos(t) {
		for split, size := range splits() {
			data := resplit(t, h.data, size)
			got, ok := goServerName(data)
			if !ok || !strings.EqualFold(got, h.want) {
				t.Errorf("%s/%s: crypto/tls read %q (parsed: %v), want %q", h.name, split, got, ok, h.want)
			}
		}
	}
}

// TestServerNameEveryPrefix checks that every truncation of a valid hello,
// however it is cut into records, asks for more bytes.
func TestServerNameEveryPrefix(t *testing.T) {
	for _, h := range goldenHellos(t) {
		for _, split := range []string{"one-record", "1-byte", "random", "header-split"} {
			data := resplit(t, h.data, splits()[split])
			for n := range len(data) {
				if _, err := ServerName(data[:n]); err != ErrIncomplete {
					t.Fatalf("%s/%s: ServerName(first %d of %d bytes) = %v; want ErrIncomplete", h.name, split, n, len(data), err)
				}
			}
		}
	}
}

// lengthFields returns the offsets and widths of every length field in a
// single-record hello: record, handshake, session ID, cipher suites,
// compression, extensions, each extension, and inside server_name.
func lengthFields(t *testing.T, data []byte) (offs, widths []int) {
	add := func(off, width int) { offs, widths = append(offs, off), append(widths, width) }
	add(3, 2)
	add(6, 3)
	p := 9 + 2 + 32
	add(p, 1)
	p += 1 + int(data[p])
	add(p, 2)
	p += 2 + (int(data[p])<<8 | int(data[p+1]))
	add(p, 1)
	p += 1 + int(data[p])
	if p == len(data) {
		return
	}
	add(p, 2)
	p += 2
	for p < len(data) {
		typ, n := int(data[p])<<8|int(data[p+1]), int(data[p+2])<<8|int(data[p+3])
		add(p+2, 2)
		if typ == extServerName {
			add(p+4, 2)   // list
			add(p+4+3, 2) // host_name
		}
		p += 4 + n
	}
	if p != len(data) {
		t.Fatalf("walked to %d of %d bytes", p, len(data))
	}
	return
}

// TestServerNameBadLengths bumps every length field of each golden hello
// up and down by one: the result must be an error, never a name.
func TestServerNameBadLengths(t *testing.T) {
	for _, h := range goldenHellos(t) {
		data := resplit(t, h.data, splits()["one-record"])
		offs, widths := lengthFields(t, data)
		for i, off := range offs {
			for _, delta := range []int{-1, 1} {
				b := bytes.Clone(data)
				v := 0
				for _, c := range b[off : off+widths[i]] {
					v = v<<8 | int(c)
				}
				v += delta
				for j := widths[i] - 1; j >= 0; j-- {
					b[off+j] = byte(v)
					v >>= 8
				}
				if got, err := ServerName(b); err == nil {
					t.Errorf("%s: length at offset %d %+d: ServerName = %q, nil; want an error", h.name, off, delta, got)
				}
			}
		}
	}
}

// TestServerNameCorrupted flips bytes in the framing of a hello and
// expects errors.
func TestServerNameCorrupted(t *testing.T) {
	data := resplit(t, goldenHellos(t)[0].data, func(int) int { return 100 })
	second := 5 + 100 // the second record header
	for _, tc := range []struct {
		name string
		off  int
		val  byte
		want error
	}{
		{"first record type", 0, 0x17, ErrNotTLS},
		{"first record major version", 1, 0x02, ErrNotTLS},
		{"second record type alert", second, 0x15, ErrMalformedHello},
		{"second record type application data", second, 0x17, ErrMalformedHello},
		{"second record type change_cipher_spec", second, 0x14, ErrMalformedHello},
		{"second record major version", second + 1, 0x04, ErrMalformedHello},
		{"second record empty", second + 4, 0, ErrMalformedHello},
		{"handshake type ServerHello", 5, 2, ErrMalformedHello},
		{"handshake length over MaxHelloSize", 6, 1, ErrMalformedHello},
		{"legacy_version not TLS", 9, 2, ErrMalformedHello},
		{"session ID longer than 32", 9 + 2 + 32, 33, ErrMalformedHello},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := bytes.Clone(data)
			b[tc.off] = tc.val
			got, err := ServerName(b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("ServerName = %q, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// Hand-built ClientHellos.

type extension struct {
	typ  uint16
	data []byte
}

type helloSpec struct {
	version     uint16
	sessionID   []byte
	suites      []byte
	compression []byte
	noExts      bool
	exts        []extension
	trailing    []byte
}

func defaultSpec(exts ...extension) helloSpec {
	return helloSpec{
		version:     0x0303,
		sessionID:   bytes.Repeat([]byte{0xaa}, 32),
		suites:      []byte{0x13, 0x01, 0x13, 0x02},
		compression: []byte{0},
		exts:        exts,
	}
}

// body returns the ClientHello message body.
func (s helloSpec) body() []byte {
	var b cryptobyte.Builder
	b.AddUint16(s.version)
	b.AddBytes(bytes.Repeat([]byte{0x42}, 32))
	b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(s.sessionID) })
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(s.suites) })
	b.AddUint8LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(s.compression) })
	if !s.noExts {
		b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
			for _, e := range s.exts {
				b.AddUint16(e.typ)
				b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes(e.data) })
			}
		})
	}
	b.AddBytes(s.trailing)
	return b.BytesOrPanic()
}

// message wraps a body in a ClientHello handshake header.
func message(body []byte) []byte {
	n := len(body)
	return append([]byte{handshakeTypeClientHello, byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}

// record wraps a spec's hello in one record.
func (s helloSpec) record() []byte {
	return records(message(s.body()), func(int) int { return maxRecordPayload })
}

type sniEntry struct {
	typ  uint8
	name string
}

// sni builds a server_name extension holding entries.
func sni(entries ...sniEntry) extension {
	var b cryptobyte.Builder
	b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) {
		for _, e := range entries {
			b.AddUint8(e.typ)
			b.AddUint16LengthPrefixed(func(b *cryptobyte.Builder) { b.AddBytes([]byte(e.name)) })
		}
	})
	return extension{extServerName, b.BytesOrPanic()}
}

func hostSNI(name string) extension { return sni(sniEntry{nameTypeHostName, name}) }

func TestServerNameBuilt(t *testing.T) {
	alpn := extension{16, []byte{0, 3, 2, 'h', '2'}}
	ech := extension{extECH, []byte{0, 1, 2, 3}}
	for _, tc := range []struct {
		name    string
		data    []byte
		want    string
		wantECH bool
		err     string // substring of the error, "" for success
	}{
		{name: "plain", data: defaultSpec(hostSNI("example.com")).record(), want: "example.com"},
		{name: "no extensions block", data: func() []byte { s := defaultSpec(); s.noExts = true; return s.record() }(), want: ""},
		{name: "empty extensions block", data: defaultSpec().record(), want: ""},
		{name: "ALPN only", data: defaultSpec(alpn).record(), want: ""},
		{name: "ECH", data: defaultSpec(hostSNI("public.example"), ech).record(), want: "public.example", wantECH: true},
		{name: "upper case", data: defaultSpec(hostSNI("WWW.Example.COM")).record(), want: "www.example.com"},
		{name: "SSLv3-era version", data: func() []byte { s := defaultSpec(hostSNI("a.example")); s.version = 0x0300; return s.record() }(), want: "a.example"},

		{name: "duplicate server_name", data: defaultSpec(hostSNI("a.example"), hostSNI("b.example")).record(), err: "duplicate extension 0"},
		{name: "duplicate ALPN", data: defaultSpec(alpn, hostSNI("a.example"), alpn).record(), err: "duplicate extension 16"},
		{name: "two host names", data: defaultSpec(sni(sniEntry{0, "a.example"}, sniEntry{0, "b.example"})).record(), err: "more than one server name"},
		{name: "host name and other type", data: defaultSpec(sni(sniEntry{0, "a.example"}, sniEntry{1, "b.example"})).record(), err: "more than one server name"},
		{name: "other name type only", data: defaultSpec(sni(sniEntry{7, "a.example"})).record(), err: "not host_name"},
		{name: "empty server name list", data: defaultSpec(sni()).record(), err: "empty or truncated"},
		{name: "empty server_name extension", data: defaultSpec(extension{extServerName, nil}).record(), err: "does not match its list"},
		{name: "server_name list shorter than extension", data: defaultSpec(extension{extServerName, append(hostSNI("a.example").data, 0)}).record(), err: "does not match its list"},
		{name: "empty host name", data: defaultSpec(hostSNI("")).record(), err: "empty host name"},
		{name: "NUL in host name", data: defaultSpec(hostSNI("allowed.example\x00.evil.example")).record(), err: "byte 0x00"},
		{name: "trailing dot", data: defaultSpec(hostSNI("Example.COM.")).record(), want: "example.com"},
		{name: "two trailing dots", data: defaultSpec(hostSNI("example.com..")).record(), err: "empty label"},
		{name: "a dot alone", data: defaultSpec(hostSNI(".")).record(), err: "empty label"},
		{name: "two dots alone", data: defaultSpec(hostSNI("..")).record(), err: "empty label"},
		{name: "IPv4 literal with a trailing dot", data: defaultSpec(hostSNI("203.0.113.7.")).record(), err: "IP address"},
		{name: "trailing dot past 253 bytes", data: defaultSpec(hostSNI(strings.Repeat("abcdefghi.", 25) + "abcd.")).record(), err: "longer than 253"},
		{name: "leading dot", data: defaultSpec(hostSNI(".example.com")).record(), err: "empty label"},
		{name: "double dot", data: defaultSpec(hostSNI("example..com")).record(), err: "empty label"},
		{name: "wildcard", data: defaultSpec(hostSNI("*.example.com")).record(), err: "byte 0x2a"},
		{name: "space", data: defaultSpec(hostSNI("exa mple.com")).record(), err: "byte 0x20"},
		{name: "UTF-8", data: defaultSpec(hostSNI("bücher.example")).record(), err: "byte 0xc3"},
		{name: "IPv4 literal", data: defaultSpec(hostSNI("203.0.113.7")).record(), err: "IP address"},
		{name: "numeric TLD", data: defaultSpec(hostSNI("example.123")).record(), err: "IP address"},
		{name: "hex label", data: defaultSpec(hostSNI("evil.0x7f")).record(), err: "IP address"},
		{name: "IPv6 literal", data: defaultSpec(hostSNI("2001:db8::1")).record(), err: "byte 0x3a"},
		{name: "label of 64", data: defaultSpec(hostSNI(strings.Repeat("a", 64) + ".example")).record(), err: "longer than 63"},
		{name: "name of 254", data: defaultSpec(hostSNI(strings.Repeat("abcdefghi.", 25) + "abcd")).record(), err: "longer than 253"},
		{name: "trailing garbage after extensions", data: func() []byte { s := defaultSpec(hostSNI("a.example")); s.trailing = []byte{0}; return s.record() }(), err: "trailing garbage"},
		{name: "no compression methods", data: func() []byte { s := defaultSpec(hostSNI("a.example")); s.compression = nil; return s.record() }(), err: "empty compression"},
		{name: "no cipher suites", data: func() []byte { s := defaultSpec(hostSNI("a.example")); s.suites = nil; return s.record() }(), err: "cipher suites list of 0"},
		{name: "odd cipher suites", data: func() []byte { s := defaultSpec(hostSNI("a.example")); s.suites = []byte{1, 2, 3}; return s.record() }(), err: "cipher suites list of 3"},
		{name: "session ID of 33", data: func() []byte {
			s := defaultSpec(hostSNI("a.example"))
			s.sessionID = make([]byte, 33)
			return s.record()
		}(), err: "longer than 32"},
		{name: "body too short", data: records(message([]byte{3, 3, 1}), func(int) int { return 100 }), err: "too short"},
		{name: "record over 2^14", data: append([]byte{0x16, 3, 1, 0x40, 0x01}, make([]byte, 0x4001)...), err: "more than 16384"},
		{name: "empty first record", data: append([]byte{0x16, 3, 1, 0, 0}, defaultSpec().record()...), err: "record 0 is empty"},
		{name: "hello over MaxHelloSize", data: []byte{0x16, 3, 1, 0, 4, 1, 0, 0x40, 0x01}, err: "more than 16384"},
		{name: "record longer than the hello", data: func() []byte {
			r := defaultSpec(hostSNI("a.example")).record()
			r = append(r, 0) // one byte of a second handshake message
			r[4]++
			return r
		}(), err: "1 bytes after the end"},
		{name: "second record runs past the hello", data: func() []byte {
			msg := message(defaultSpec(hostSNI("a.example")).body())
			r := records(msg[:10], func(int) int { return 10 })
			return append(r, 0x16, 3, 1, 0, byte(len(msg)-10+1), 0)
		}(), err: "1 bytes after the end"},
		{name: "hello request, not hello", data: []byte{0x16, 3, 1, 0, 4, 0, 0, 0, 0}, err: "type 0 is not ClientHello"},
		{name: "not TLS at all", data: []byte("GET / HTTP/1.1\r\n"), err: ErrNotTLS.Error()},
		{name: "SSLv2 hello", data: []byte{0x80, 0x2e, 0x01, 0x03, 0x01}, err: ErrNotTLS.Error()},
		{name: "record version 2", data: []byte{0x16, 2, 0}, err: ErrNotTLS.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for split, size := range map[string]func(int) int{"as built": nil, "1-byte records": func(int) int { return 1 }} {
				data := tc.data
				if size != nil {
					if tc.err != "" {
						continue // the framing of error cases is part of the case
					}
					data = resplit(t, data, size)
				}
				ch, err := ParseClientHello(data)
				if tc.err == "" {
					if err != nil || ch.ServerName != tc.want || ch.ECH != tc.wantECH {
						t.Fatalf("%s: ParseClientHello = %+v, %v; want %q, ECH %v", split, ch, err, tc.want, tc.wantECH)
					}
					continue
				}
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("%s: ParseClientHello = %+v, %v; want an error containing %q", split, ch, err, tc.err)
				}
				if err != ErrNotTLS && !errors.Is(err, ErrMalformedHello) {
					t.Fatalf("%s: error %v does not wrap ErrMalformedHello", split, err)
				}
			}
		})
	}
}

func TestServerNameHostNames(t *testing.T) {
	for _, name := range []string{
		"a",
		"localhost",
		"xn--bcher-kva.example",
		"_dmarc.example.com",
		"a-b.c-d.example",
		"1password.com",
		"0x.example", // a label that is a number must be the last one
		strings.Repeat("a", 63) + ".example",
		strings.Repeat("abcdefghi.", 25) + "abc", // 253 bytes
	} {
		got, err := ServerName(defaultSpec(hostSNI(name)).record())
		if err != nil || got != name {
			t.Errorf("ServerName with SNI %q = %q, %v", name, got, err)
		}
		// Fully qualified: the same name.
		got, err = ServerName(defaultSpec(hostSNI(name + ".")).record())
		if err != nil || got != name {
			t.Errorf("ServerName with SNI %q = %q, %v", name+".", got, err)
		}
	}
}

// TestServerNameManyExtensions checks that the duplicate check scales past
// the linear set and still finds duplicates there.
func TestServerNameManyExtensions(t *testing.T) {
	var exts []extension
	for i := range 3000 {
		exts = append(exts, extension{uint16(1000 + i), nil})
	}
	ok := append(append([]extension{}, exts...), hostSNI("many.example"))
	if got, err := ServerName(defaultSpec(ok...).record()); err != nil || got != "many.example" {
		t.Fatalf("3000 extensions: %q, %v", got, err)
	}
	dup := append(append([]extension{}, exts...), extension{1005, nil})
	if _, err := ServerName(defaultSpec(dup...).record()); err == nil || !strings.Contains(err.Error(), "duplicate extension 1005") {
		t.Fatalf("duplicate after 3000 extensions: %v", err)
	}
	early := append([]extension{{1, nil}}, exts[:40]...)
	early = append(early, extension{1, nil})
	if _, err := ServerName(defaultSpec(early...).record()); err == nil || !strings.Contains(err.Error(), "duplicate extension 1") {
		t.Fatalf("duplicate of an extension from the linear set: %v", err)
	}
}

// TestServerNameLargestHello checks a hello of exactly MaxHelloSize, in one
// record and in 1-byte records (the MaxHelloWireSize worst case).
func TestServerNameLargestHello(t *testing.T) {
	s := defaultSpec(hostSNI("big.example"), extension{21, nil}) // padding
	pad := MaxHelloSize - len(s.body())
	s.exts[1].data = make([]byte, pad)
	msg := message(s.body())
	if len(msg) != handshakeHeaderLen+MaxHelloSize {
		t.Fatalf("built a hello of %d bytes", len(msg))
	}
	for _, size := range []int{maxRecordPayload, 1} {
		data := records(msg, func(int) int { return size })
		if size == 1 && len(data) != MaxHelloWireSize {
			t.Fatalf("1-byte records: %d bytes, MaxHelloWireSize is %d", len(data), MaxHelloWireSize)
		}
		if got, err := ServerName(data); err != nil || got != "big.example" {
			t.Fatalf("records of %d: %q, %v", size, got, err)
		}
	}
	s.exts[1].data = make([]byte, pad+1)
	if _, err := ServerName(records(message(s.body()), func(int) int { return maxRecordPayload })); err == nil || !strings.Contains(err.Error(), "more than 16384") {
		t.Fatalf("hello of MaxHelloSize+1: %v", err)
	}
}

func TestServerNameAllocs(t *testing.T) {
	data := goldenHellos(t)[0].data
	if n := testing.AllocsPerRun(100, func() { ServerName(data) }); n > 1 {
		t.Errorf("ServerName allocates %v times per call, want at most 1", n)
	}
	split := resplit(t, data, func(int) int { return 1 })
	ServerName(split) // warm the buffer pool
	if n := testing.AllocsPerRun(100, func() { ServerName(split) }); n > 1 {
		t.Errorf("ServerName of 1-byte records allocates %v times per call, want at most 1", n)
	}
	if n := testing.AllocsPerRun(100, func() { ServerName(data[:len(data)-1]) }); n != 0 {
		t.Errorf("ServerName of an incomplete hello allocates %v times per call, want 0", n)
	}
}

// A caller that waits for HelloNeeds bytes between parses parses a hello
// sent one byte per record a few dozen times, not once per record, and
// never waits past its end.
func TestHelloNeedsBoundsParses(t *testing.T) {
	for _, spec := range []helloSpec{defaultSpec(hostSNI("split.example")), defaultSpec(hostSNI("pq.example"), extension{21, make([]byte, 1200)})} {
		data := records(message(spec.body()), func(int) int { return 1 })
		have, parses := 0, 0
		for {
			_, err := ServerName(data[:have])
			parses++
			if err != ErrIncomplete {
				if err != nil || have != len(data) {
					t.Fatalf("after %d parses at %d of %d bytes: %v", parses, have, len(data), err)
				}
				break
			}
			need := HelloNeeds(data[:have])
			if need <= have || need > len(data) {
				t.Fatalf("HelloNeeds at %d of %d bytes: %d", have, len(data), need)
			}
			have = need
		}
		if records := len(data) / 6; parses > 80 {
			t.Errorf("%d records: %d parses", records, parses)
		}
		t.Logf("%d bytes in %d records: %d parses", len(data), len(data)/6, parses)
	}
}
