package sniff

import (
	"sync"

	"golang.org/x/crypto/cryptobyte"
)

// TLS constants (RFC 8446, RFC 6066).
const (
	recordTypeHandshake      = 0x16
	handshakeTypeClientHello = 1
	recordHeaderLen          = 5
	handshakeHeaderLen       = 4
	// maxRecordPayload is the largest TLSPlaintext.length (RFC 8446 5.1).
	maxRecordPayload = 1 << 14
	extServerName    = 0
	extECH           = 0xfe0d // encrypted_client_hello
	nameTypeHostName = 0
)

// MaxHelloSize is the largest ClientHello message body [ServerName]
// accepts. Real hellos, post-quantum key shares included, stay under 2 KB;
// a hello that claims more is refused rather than waited for.
const MaxHelloSize = 16 << 10

// MaxHelloWireSize is how many bytes of stream the largest acceptable
// ClientHello can take: MaxHelloSize plus its handshake header, cut into
// records that carry one byte each. A caller that peeks less than this
// gives up on such hellos (which fails closed) before [ServerName] would.
const MaxHelloWireSize = (handshakeHeaderLen + MaxHelloSize) * (recordHeaderLen + 1)

// helloBuf holds a reassembled ClientHello message.
type helloBuf [handshakeHeaderLen + MaxHelloSize]byte

// helloBufs caches reassembly buffers so that a hello split over many
// records costs no more allocations than one in a single record. (cryptobyte
// lets the bytes it parses escape, so a stack buffer would not stay there.)
var helloBufs = sync.Pool{New: func() any { return new(helloBuf) }}

// ClientHello is what [ParseClientHello] reports about a ClientHello.
type ClientHello struct {
	// ServerName is the SNI host_name in lower case, "" if the hello has
	// no server_name extension.
	ServerName string
	// ECH is true if the hello carries an encrypted_client_hello extension.
	// Then ServerName is only the public name of a client-facing server,
	// and the name the client really wants is encrypted. Chrome sends a
	// GREASE ECH extension in every hello, so its presence alone proves
	// nothing.
	ECH bool
}

// ServerName parses the TLS records at the start of data that hold a
// ClientHello and returns its SNI host_name, in lower case, or "" with a nil
// error if the hello has no server_name extension. It is
// ParseClientHello(data).ServerName.
//
// The hello may be split over any number of records of any size, down to
// one byte of handshake per record, and data may end anywhere: ServerName
// returns [ErrIncomplete] while the hello is not all there, [ErrNotTLS] if
// data does not start with a TLS handshake record, and an error wrapping
// [ErrMalformedHello] for anything a careful TLS server would refuse:
// records that are empty, longer than 2^14 or not handshake records,
// another handshake message than ClientHello, a hello longer than
// [MaxHelloSize] or followed by more handshake data in its last record,
// lengths that do not add up, trailing bytes, duplicate extensions, a
// server_name list with other than exactly one host_name, and a host name
// that is not a valid DNS name (NUL bytes, an empty label, an IP literal).
// One trailing dot is dropped ("api.example.com." is api.example.com), as
// from an HTTP Host and a policy entry.
// Bytes after the hello's last record are not looked at.
func ServerName(data []byte) (string, error) {
	h, err := ParseClientHello(data)
	return h.ServerName, err
}

// ParseClientHello is [ServerName] that also reports whether the hello
// carries ECH.
func ParseClientHello(data []byte) (ClientHello, error) {
	end, nrec, _, err := scanHelloRecords(data)
	if err != nil {
		return ClientHello{}, err
	}
	if nrec == 1 {
		return parseHelloBody(data[recordHeaderLen+handshakeHeaderLen : end])
	}
	return parseReassembled(data[:end])
}

// HelloNeeds returns, for data that [ServerName] finds incomplete, a
// length data must at least reach before ServerName can return a hello:
// the records whose headers are there, whole, and once the ClientHello's
// length is known the rest of it, behind one more record header. It
// returns 0 if ServerName would not return [ErrIncomplete]. A malformed
// stream may be refused earlier (each record header is checked as soon
// as it is there), so a caller that waits for that many bytes needs a
// timer too, for a client that sent a bad header and waits.
//
// A caller that peeks at a stream can wait for that many bytes rather
// than parse again on every segment: a hello sent one byte per record,
// one record per segment, is then parsed a few dozen times, not once for
// each of its thousands of segments.
func HelloNeeds(data []byte) int {
	_, _, need, err := scanHelloRecords(data)
	if err != ErrIncomplete {
		return 0
	}
	return need
}

// scanHelloRecords walks the records at the start of data until they hold
// one whole handshake message, checking each record header and the
// handshake header as soon as their bytes are present. It returns the
// offset in data just past the last record of the hello and how many
// records there are; with ErrIncomplete, need is the length data must at
// least reach before the answer can change (see HelloNeeds).
func scanHelloRecords(data []byte) (end, nrec, need int, err error) {
	var hs [handshakeHeaderLen]byte // the handshake header, as it arrives
	got := 0                        // handshake bytes in the complete records before this one
	total := -1                     // length of the handshake message with its header, once known
	off := 0
	// rest is how many handshake bytes the hello surely lacks once it
	// has have: all of it once its length is known, else what its
	// header lacks.
	rest := func(have int) int {
		if total >= 0 {
			return total - have
		}
		return max(handshakeHeaderLen-have, 0)
	}
	for rec := 0; ; rec++ {
		h := data[off:]
		if len(h) >= 1 && h[0] != recordTypeHandshake {
			if rec == 0 {
				return 0, 0, 0, ErrNotTLS
			}
			return 0, 0, 0, helloErr("record %d has content type %d; nothing may be interleaved with the records of a ClientHello", rec, h[0])
		}
		if len(h) >= 2 && h[1] != 0x03 {
			if rec == 0 {
				return 0, 0, 0, ErrNotTLS
			}
			return 0, 0, 0, helloErr("record %d has major version %d, not 3 (TLS)", rec, h[1])
		}
		if len(h) < recordHeaderLen {
			// Another record, with at least what the hello still lacks
			// (and a record holds at least a byte).
			return 0, 0, off + recordHeaderLen + max(rest(got), 1), ErrIncomplete
		}
		n := int(h[3])<<8 | int(h[4])
		if n == 0 {
			return 0, 0, 0, helloErr("record %d is empty", rec)
		}
		if n > maxRecordPayload {
			return 0, 0, 0, helloErr("record %d has length %d, more than %d", rec, n, maxRecordPayload)
		}
		frag := h[recordHeaderLen:]
		if len(frag) > n {
			frag = frag[:n]
		}
		if total < 0 {
			for i := 0; got+i < handshakeHeaderLen && i < len(frag); i++ {
				hs[got+i] = frag[i]
			}
			if got < 1 && len(frag) >= 1 && hs[0] != handshakeTypeClientHello {
				return 0, 0, 0, helloErr("handshake message type %d is not ClientHello", hs[0])
			}
			if got+len(frag) >= handshakeHeaderLen {
				l := int(hs[1])<<16 | int(hs[2])<<8 | int(hs[3])
				if l > MaxHelloSize {
					return 0, 0, 0, helloErr("ClientHello length %d is more than %d", l, MaxHelloSize)
				}
				total = handshakeHeaderLen + l
			}
		}
		if total >= 0 && got+n > total {
			return 0, 0, 0, helloErr("record %d holds %d bytes after the end of the ClientHello", rec, got+n-total)
		}
		if len(frag) < n {
			need = off + recordHeaderLen + n
			if more := rest(got + n); more > 0 {
				need += recordHeaderLen + more
			}
			return 0, 0, need, ErrIncomplete
		}
		got += n
		off += recordHeaderLen + n
		if got == total {
			return off, rec + 1, 0, nil
		}
	}
}

// parseReassembled joins the handshake fragments of the n records in data,
// which scanHelloRecords has checked, and parses the hello.
func parseReassembled(data []byte) (ClientHello, error) {
	hb := helloBufs.Get().(*helloBuf)
	defer helloBufs.Put(hb)
	buf := hb[:0]
	for len(data) > 0 {
		n := int(data[3])<<8 | int(data[4])
		buf = append(buf, data[recordHeaderLen:recordHeaderLen+n]...)
		data = data[recordHeaderLen+n:]
	}
	return parseHelloBody(buf[handshakeHeaderLen:])
}

// parseHelloBody parses a ClientHello message body (RFC 8446 4.1.2,
// RFC 5246 7.4.1.2).
func parseHelloBody(body []byte) (ClientHello, error) {
	var hello ClientHello
	s := cryptobyte.String(body)
	var version uint16
	if !s.ReadUint16(&version) || !s.Skip(32) {
		return hello, helloErr("%d bytes are too short for version and random", len(body))
	}
	if version>>8 != 0x03 {
		return hello, helloErr("legacy_version 0x%04x is not TLS", version)
	}
	var sessionID, suites, compression cryptobyte.String
	if !s.ReadUint8LengthPrefixed(&sessionID) {
		return hello, helloErr("session ID runs past the end of the message")
	}
	if len(sessionID) > 32 {
		return hello, helloErr("session ID of %d bytes is longer than 32", len(sessionID))
	}
	if !s.ReadUint16LengthPrefixed(&suites) {
		return hello, helloErr("cipher suites run past the end of the message")
	}
	if len(suites) == 0 || len(suites)%2 != 0 {
		return hello, helloErr("cipher suites list of %d bytes; want a positive even length", len(suites))
	}
	if !s.ReadUint8LengthPrefixed(&compression) {
		return hello, helloErr("compression methods run past the end of the message")
	}
	if len(compression) == 0 {
		return hello, helloErr("empty compression methods list")
	}
	if s.Empty() {
		return hello, nil // a hello without extensions (TLS 1.2 and older)
	}
	var exts cryptobyte.String
	if !s.ReadUint16LengthPrefixed(&exts) {
		return hello, helloErr("extensions run past the end of the message")
	}
	if !s.Empty() {
		return hello, helloErr("%d bytes of trailing garbage after the extensions", len(s))
	}
	var seen extensionSet
	var name []byte
	var hc hostCheck
	for !exts.Empty() {
		var typ uint16
		var ext cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&ext) {
			return hello, helloErr("extension runs past the end of the extensions block")
		}
		if !seen.add(typ) {
			return hello, helloErr("duplicate extension %d", typ)
		}
		switch typ {
		case extServerName:
			var err error
			if name, hc, err = parseServerNameExt(ext); err != nil {
				return hello, err
			}
		case extECH:
			hello.ECH = true
		}
	}
	if name != nil {
		hello.ServerName = lowerString(name, hc.upper)
	}
	return hello, nil
}

// parseServerNameExt parses the data of a server_name extension (RFC 6066
// section 3) and returns its only host_name.
func parseServerNameExt(ext cryptobyte.String) ([]byte, hostCheck, error) {
	var list cryptobyte.String
	if !ext.ReadUint16LengthPrefixed(&list) || !ext.Empty() {
		return nil, hostCheck{}, helloErr("server_name extension length does not match its list")
	}
	var typ uint8
	var name cryptobyte.String
	if !list.ReadUint8(&typ) || !list.ReadUint16LengthPrefixed(&name) {
		return nil, hostCheck{}, helloErr("server_name list is empty or truncated")
	}
	if !list.Empty() {
		return nil, hostCheck{}, helloErr("server_name list holds more than one server name")
	}
	if typ != nameTypeHostName {
		return nil, hostCheck{}, helloErr("server name of type %d, not host_name", typ)
	}
	// A fully qualified name's one trailing dot is dropped, as an
	// HTTP Host's is and a policy entry's: "api.example.com." is
	// api.example.com. RFC 6066 says the name carries none, but clients
	// that take a name as given send it, and servers accept it. More than
	// one, or a dot alone, stays an empty label.
	if len(name) > 1 && name[len(name)-1] == '.' {
		name = name[:len(name)-1]
	}
	hc, err := checkHostName(name)
	if err != nil {
		return nil, hc, helloErr("server name: %v", err)
	}
	if hc.numericEnd {
		return nil, hc, helloErr("server name %q is an IP address or ends in a number; RFC 6066 allows only host names", string(name))
	}
	return name, hc, nil
}

// extensionSet remembers the extension types seen in one hello. Real hellos
// have fewer than 32 extensions, which a linear scan handles; past that the
// set switches to a bitmap so that a hello of thousands of empty
// extensions costs linear time.
type extensionSet struct {
	small [32]uint16
	n     int
	big   *[1 << 16 / 64]uint64
}

// add records typ and reports whether it was new.
func (s *extensionSet) add(typ uint16) bool {
	if s.big != nil {
		w, bit := typ/64, uint64(1)<<(typ%64)
		if s.big[w]&bit != 0 {
			return false
		}
		s.big[w] |= bit
		return true
	}
	for _, t := range s.small[:s.n] {
		if t == typ {
			return false
		}
	}
	if s.n < len(s.small) {
		s.small[s.n] = typ
		s.n++
		return true
	}
	s.big = new([1 << 16 / 64]uint64)
	for _, t := range s.small {
		s.big[t/64] |= 1 << (t % 64)
	}
	s.big[typ/64] |= 1 << (typ % 64)
	return true
}
