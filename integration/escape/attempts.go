package main

// attempt tries one way out and reports what it did.
type attempt func(*config) row

// attemptOrder is the order of the table in docs/security.md.
var attemptOrder = []string{
	"tcp", "sni-spoof", "h2c", "keepalive-host", "absolute-uri", "connect",
	"udp", "quic", "dns-rogue", "dns-tunnel", "raw-ip", "af-packet", "so-mark",
	"ipv6", "ipv4-mapped", "proxy-port", "icmp", "icmp-lan", "router-advert",
	"rebind", "arp-spoof", "ip-spoof", "arp-trailer", "mld-aux", "nd-options", "l2-flood",
	"http-desync", "h2c-upgrade", "rebind-nat64", "open-nat64", "silent",
}

// attempts maps each attempt's name to its code:
//
//	tcp             TCP to the denied host's recorder port, with a payload
//	sni-spoof       TLS to the denied host's IP with the allowed name as SNI,
//	                then an HTTP request inside
//	h2c             HTTP/2 prior knowledge (no Host, no SNI) to the denied
//	                host's HTTP port
//	keepalive-host  a keep-alive HTTP/1.1 connection to the allowed host:
//	                one request for it, then one with Host: the denied name
//	absolute-uri    GET http://DENIED/ with Host: ALLOWED, to the allowed host
//	connect         CONNECT DENIED:PORT with Host: ALLOWED, then a payload
//	udp             a datagram to the denied host's UDP echo port
//	quic            a 1200-byte datagram shaped as a QUIC Initial to UDP 443 of
//	                the denied and of the allowed host (QUIC is never proxied)
//	dns-rogue       A queries to DNS servers that are not the resolver
//	dns-tunnel      TXT queries for random names carrying a payload under the
//	                tunnel zone, through the resolver, over UDP and TCP
//	raw-ip          hand-made IPv4/UDP to the denied host through a raw socket
//	                (IPPROTO_RAW) and a raw UDP socket
//	af-packet       an Ethernet frame holding IPv4/UDP to the denied host, sent
//	                to the default gateway's MAC through an AF_PACKET socket
//	so-mark         TCP and UDP to the denied host with SO_MARK set to each of
//	                the given marks
//	ipv6            TCP and UDP to the denied host's IPv6 address
//	ipv4-mapped     TCP and UDP to ::ffff:DENIED4 through AF_INET6 sockets
//	proxy-port      HTTP with Host: the denied name, straight to the proxy's
//	                listener ports (loopback and the sandbox's own addresses)
//	icmp            echo requests with 1000-byte payloads, and timestamp,
//	                information and address-mask requests likewise padded,
//	                to the denied host through a raw socket; echo requests
//	                through unprivileged ping sockets (IPv4 and ICMPv6, which
//	                ping_group_range opens); ICMPv6 echo through a raw socket
//	icmp-lan        the same to the private addresses of the host's LAN and
//	                to the neighbour sandbox on the same bridge
//	router-advert   IPv6 router advertisements to all nodes on the link (a
//	                default router and an autonomous prefix), through an
//	                AF_PACKET socket, from the probe's link-local address
//	rebind          for each allowed name whose DNS answers private
//	                addresses: HTTP with that Host to port 80, and a TLS
//	                ClientHello with that SNI and then Redis commands to port
//	                6379, at the address DNS gave (or the allowed host's)
//	arp-spoof       ARP (gratuitous, unsolicited replies to the gateway, and
//	                replies to requests) and IPv6 neighbour advertisements
//	                claiming the neighbour's addresses for the probe's MAC
//	ip-spoof        the neighbour's addresses put on the probe's interface
//	                (CAP_NET_ADMIN), a listener on the spoof port answering as
//	                the neighbour, and arp-spoof's announcements meanwhile
//	arp-trailer     ARP requests for the gateway and gratuitous replies, each
//	                with 1000 bytes after the ARP packet, broadcast and to
//	                the neighbour's MAC
//	mld-aux         MLDv2 reports whose record holds 1000 bytes of auxiliary
//	                data, and MLD reports with the data after them
//	nd-options      neighbour solicitations and advertisements to all nodes,
//	                router solicitations to all routers, and solicitations
//	                to the neighbour, each with an unknown option of 1000
//	                bytes
//	l2-flood        frames of an unknown ethertype, broadcast, multicast and
//	                to the neighbour's MAC; well-formed neighbour
//	                solicitations whose target carries data, to all nodes
//	                and to the neighbour
//	http-desync     to the allowed host: a request whose response body holds
//	                an "HTTP/1.1 101" line (the servers' /fake-101), a
//	                WebSocket upgrade sent while that body is outstanding,
//	                then a request with Host: the denied name
//	h2c-upgrade     an Upgrade: h2c request to the allowed host, then an
//	                HTTP/2 request with :authority the denied name
//	rebind-nat64    rebind for the names whose DNS answers a LAN address
//	                embedded in the local-use NAT64 prefix 64:ff9b:1::/48
//	                (-rebind-nat64)
//	open-nat64      HTTP and Redis commands straight to those addresses
//	                (-nat64), as a workload in mode open names them
//	silent          many connections to a recorder port of the denied host
//	                that send nothing, held past the proxy's sniff timeout,
//	                then one byte on each
var attempts = map[string]attempt{
	"tcp":            tryTCP,
	"sni-spoof":      trySNISpoof,
	"h2c":            tryH2C,
	"keepalive-host": tryKeepAliveHost,
	"absolute-uri":   tryAbsoluteURI,
	"connect":        tryConnect,
	"udp":            tryUDP,
	"quic":           tryQUIC,
	"dns-rogue":      tryDNSRogue,
	"dns-tunnel":     tryDNSTunnel,
	"raw-ip":         tryRawIP,
	"af-packet":      tryAFPacket,
	"so-mark":        trySOMark,
	"ipv6":           tryIPv6,
	"ipv4-mapped":    tryIPv4Mapped,
	"proxy-port":     tryProxyPort,
	"icmp":           tryICMP,
	"icmp-lan":       tryICMPLAN,
	"router-advert":  tryRouterAdvert,
	"rebind":         tryRebind,
	"arp-spoof":      tryARPSpoof,
	"ip-spoof":       tryIPSpoof,
	"arp-trailer":    tryARPTrailer,
	"mld-aux":        tryMLDAux,
	"nd-options":     tryNDOptions,
	"l2-flood":       tryL2Flood,
	"http-desync":    tryHTTPDesync,
	"h2c-upgrade":    tryH2CUpgrade,
	"rebind-nat64":   tryRebindNAT64,
	"open-nat64":     tryOpenNAT64,
	"silent":         trySilent,
}
