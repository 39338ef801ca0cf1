// Package egress decides which addresses a gateway may dial on its
// callers' behalf.
//
// A gateway that makes HTTP calls is a server-side request forgery waiting
// to happen: an upstream URL (or a DNS name behind it, or a redirect) that
// points at 127.0.0.1, a private network or a cloud's metadata service
// (169.254.169.254, fd00:ec2::254) turns the gateway into a proxy into its
// own network. The check here runs in the dialer's Control hook — after
// DNS, on the address actually being connected to — so a name that
// resolves to a private address today, or changes to one tomorrow
// (DNS rebinding), is refused all the same.
//
// What is refused is data, one table of prefixes and reasons: the ranges of the
// IANA special-purpose address registries (RFC 6890 and its updates) that
// are not globally reachable — this network, private, shared (CGNAT),
// loopback, link-local, IETF protocol assignments, documentation,
// benchmarking, reserved (240.0.0.0/4) and broadcast for IPv4; unspecified,
// loopback, discard-only, IETF protocol assignments, documentation, unique
// local, link-local, site-local and multicast for IPv6 — plus IPv4
// multicast, the deprecated 6to4 relay anycast block and all IPv6 space
// outside 2000::/3, where nothing is allocated for global unicast. An
// address matches its most specific (longest) prefix, so a narrow entry
// can name a range inside a wider one.
//
// Some IPv6 addresses carry an IPv4 address inside them, and a gateway on
// the path — a NAT64 translator, a 6to4 or Teredo relay, a host tunnelling
// IPv4-compatible addresses — forwards the connection to that IPv4
// address. 64:ff9b::10.0.0.1 is 10.0.0.1 one translator away. For those
// forms the embedded IPv4 address is extracted, as its RFC lays it out,
// and checked by the IPv4 rules: the IPv6 address is allowed only if every
// IPv4 address it would reach is. IPv4-mapped addresses (::ffff:a.b.c.d)
// are dialled as IPv4 and are checked as the IPv4 address they map.
//
// A NAT64 translator with a network-specific prefix of its own (RFC 6052
// §2.2, any global /96) cannot be recognised from the address alone; in a
// network that runs one, that prefix is a way in this check does not see.
package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"
)

// ErrForbidden is returned by a dial the check refused.
var ErrForbidden = errors.New("egress: address not allowed")

// metadata are the cloud metadata services, named apart from the ranges
// they fall in because reaching them is the classic SSRF prize.
var metadata = []netip.Addr{
	netip.MustParseAddr("169.254.169.254"), // AWS, GCP, Azure, OpenStack
	netip.MustParseAddr("fd00:ec2::254"),   // AWS over IPv6
	netip.MustParseAddr("100.100.100.200"), // Alibaba Cloud
}

// A rule is one prefix and what dialling into it means: refused for
// reason, or, when embedded is set, allowed only if every IPv4 address
// embedded returns is.
type rule struct {
	prefix   netip.Prefix
	reason   string
	embedded func(a [16]byte) []netip.Addr
}

// rules is what the check knows, IPv4 then IPv6, each block in address
// order. The most specific prefix an address falls in decides.
var rules = []rule{
	// IPv4 special-purpose registry, entries not globally reachable.
	{p("0.0.0.0/8"), `a "this network" address`, nil},               // RFC 791
	{p("0.0.0.0/32"), "the unspecified address", nil},               // RFC 1122; Linux connects it to this host
	{p("10.0.0.0/8"), "a private address", nil},                     // RFC 1918
	{p("100.64.0.0/10"), "a private address", nil},                  // RFC 6598, carrier-grade NAT
	{p("127.0.0.0/8"), "a loopback address", nil},                   // RFC 1122
	{p("169.254.0.0/16"), "a link-local address", nil},              // RFC 3927
	{p("172.16.0.0/12"), "a private address", nil},                  // RFC 1918
	{p("192.0.0.0/24"), "an IETF protocol assignment", nil},         // RFC 6890: DS-Lite, NAT64 discovery, the anycasts
	{p("192.0.2.0/24"), "a documentation address", nil},             // RFC 5737, TEST-NET-1
	{p("192.88.99.0/24"), "a 6to4 relay anycast address", nil},      // RFC 7526, deprecated: a relay forwards embedded addresses
	{p("192.168.0.0/16"), "a private address", nil},                 // RFC 1918
	{p("198.18.0.0/15"), "a benchmarking address", nil},             // RFC 2544
	{p("198.51.100.0/24"), "a documentation address", nil},          // RFC 5737, TEST-NET-2
	{p("203.0.113.0/24"), "a documentation address", nil},           // RFC 5737, TEST-NET-3
	{p("224.0.0.0/4"), "a multicast address", nil},                  // RFC 5771
	{p("224.0.0.0/24"), "a link-local address", nil},                // RFC 5771, local network control block
	{p("240.0.0.0/4"), "a reserved address", nil},                   // RFC 1112, reserved for future use
	{p("255.255.255.255/32"), "the limited broadcast address", nil}, // RFC 919

	// IPv6: the three blocks outside 2000::/3 (::/3, 4000::/2, 8000::/1)
	// hold no global unicast; narrower entries name the registry's parts.
	{p("::/3"), "outside global unicast (2000::/3)", nil},                     // RFC 4291 §2.4: unallocated or special
	{p("::/96"), "an IPv4-compatible address", lastWord},                      // RFC 4291 §2.5.5.1, deprecated
	{p("::/128"), "the unspecified address", nil},                             // RFC 4291
	{p("::1/128"), "a loopback address", nil},                                 // RFC 4291
	{p("64:ff9b::/96"), "a NAT64 address", lastWord},                          // RFC 6052 well-known prefix
	{p("64:ff9b:1::/48"), "a local-use NAT64 address of unknown layout", nil}, // RFC 8215: the prefix length is the operator's
	{p("64:ff9b:1::/96"), "a local-use NAT64 address", lastWord},              // RFC 8215 with the RFC 6052 /96 layout
	{p("100::/64"), "a discard-only address", nil},                            // RFC 6666
	{p("2001::/23"), "an IETF protocol assignment", nil},                      // RFC 2928: ORCHID, AMT, AS112, the anycasts
	{p("2001::/32"), "a Teredo address", teredo},                              // RFC 4380
	{p("2001:2::/48"), "a benchmarking address", nil},                         // RFC 5180
	{p("2001:db8::/32"), "a documentation address", nil},                      // RFC 3849
	{p("2002::/16"), "a 6to4 address", sixToFour},                             // RFC 3056
	{p("3fff::/20"), "a documentation address", nil},                          // RFC 9637
	{p("4000::/2"), "outside global unicast (2000::/3)", nil},                 // RFC 4291 §2.4
	{p("5f00::/16"), "a segment routing identifier", nil},                     // RFC 9602
	{p("8000::/1"), "outside global unicast (2000::/3)", nil},                 // RFC 4291 §2.4
	{p("fc00::/7"), "a private address", nil},                                 // RFC 4193, unique local
	{p("fe80::/10"), "a link-local address", nil},                             // RFC 4291
	{p("fec0::/10"), "a site-local address", nil},                             // RFC 3879, deprecated, still routed in places
	{p("ff00::/8"), "a multicast address", nil},                               // RFC 4291
	{p("ff02::/16"), "a link-local address", nil},                             // RFC 4291, link-local multicast
}

func p(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// lastWord is the IPv4 address in the last 32 bits: IPv4-compatible
// (RFC 4291) and NAT64 with a /96 prefix (RFC 6052 §2.2).
func lastWord(a [16]byte) []netip.Addr {
	return []netip.Addr{netip.AddrFrom4([4]byte(a[12:16]))}
}

// sixToFour is the relay's destination, bits 16–47 (RFC 3056 §2).
func sixToFour(a [16]byte) []netip.Addr {
	return []netip.Addr{netip.AddrFrom4([4]byte(a[2:6]))}
}

// teredo is the server (bits 32–63), which a relay may send through, and
// the client's public address (the last 32 bits, inverted), which it
// sends to (RFC 4380 §4).
func teredo(a [16]byte) []netip.Addr {
	client := [4]byte(a[12:16])
	for i := range client {
		client[i] ^= 0xff
	}
	return []netip.Addr{netip.AddrFrom4([4]byte(a[4:8])), netip.AddrFrom4(client)}
}

// match is the most specific rule ip falls in, or nil.
func match(ip netip.Addr) *rule {
	var best *rule
	for i := range rules {
		r := &rules[i]
		if r.prefix.Contains(ip) && (best == nil || r.prefix.Bits() > best.prefix.Bits()) {
			best = r
		}
	}
	return best
}

// Check reports why ip must not be dialled, or "" if it may be.
func Check(ip netip.Addr) string {
	// A zone names an interface, not another address; Prefix.Contains
	// matches no zoned address, so it goes before the table is read.
	ip = ip.WithZone("").Unmap()
	if !ip.IsValid() {
		return "not an IP address"
	}
	for _, m := range metadata {
		if ip == m {
			return "a cloud metadata address"
		}
	}
	r := match(ip)
	switch {
	case r == nil:
		return ""
	case r.embedded == nil:
		return r.reason
	}
	for _, v4 := range r.embedded(ip.As16()) {
		if why := Check(v4); why != "" {
			return fmt.Sprintf("%s whose IPv4 address %s is %s", r.reason, v4, why)
		}
	}
	return ""
}

// Control is a net.Dialer Control hook that refuses every address Check
// refuses. Use it for upstreams on the public internet; leave it off for
// one marked local (a development upstream on this machine).
func Control(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("%w: %q: %v", ErrForbidden, address, err)
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("%w: %q is not an IP address", ErrForbidden, host)
	}
	if why := Check(ip); why != "" {
		return fmt.Errorf("%w: %s is %s", ErrForbidden, ip, why)
	}
	return nil
}
