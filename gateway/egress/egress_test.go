package egress

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCheckRefusesWhatASSRFWouldReach(t *testing.T) {
	for addr, want := range map[string]string{
		"127.0.0.1":        "a loopback address",
		"127.8.9.10":       "a loopback address",
		"::1":              "a loopback address",
		"::ffff:127.0.0.1": "a loopback address",
		"10.0.0.5":         "a private address",
		"172.16.3.4":       "a private address",
		"192.168.1.1":      "a private address",
		"fd12::1":          "a private address",
		"100.64.0.1":       "a private address",
		"169.254.169.254":  "a cloud metadata address",
		"fd00:ec2::254":    "a cloud metadata address",
		"169.254.1.1":      "a link-local address",
		"fe80::1":          "a link-local address",
		"0.0.0.0":          "the unspecified address",
		"::":               "the unspecified address",
		"224.0.0.1":        "a link-local address",
		"239.1.2.3":        "a multicast address",
		"8.8.8.8":          "",
		"2606:4700::1111":  "",
		"100.128.0.1":      "",
	} {
		t.Run(addr, func(t *testing.T) {
			assert.Equal(t, want, Check(netip.MustParseAddr(addr)), addr)
		})
	}
}

// A dialer with Control refuses after DNS: "localhost" is an innocent
// name that resolves to a loopback address.
func TestControlRefusesANameThatResolvesToLoopback(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	d := net.Dialer{Timeout: time.Second, Control: Control}
	_, err = d.DialContext(context.Background(), "tcp", net.JoinHostPort("localhost", port))
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrForbidden), "refused by the check, not by a closed port: %v", err)

	plain := net.Dialer{Timeout: time.Second}
	conn, err := plain.DialContext(context.Background(), "tcp", ln.Addr().String())
	require.NoError(t, err, "without the check the same address answers: the refusal above is the check's")
	_ = conn.Close()
}

func TestControlRefusesTheMetadataAddressWithoutConnecting(t *testing.T) {
	d := net.Dialer{Timeout: 50 * time.Millisecond, Control: Control}
	_, err := d.DialContext(context.Background(), "tcp", "169.254.169.254:80")
	assert.ErrorIs(t, err, ErrForbidden)
	assert.ErrorContains(t, err, "metadata")
}

// checkCase is one address and what Check must say of it: "" if it may be
// dialled, otherwise a word of the reason.
type checkCase struct {
	description string
	addr        string
	want        string
}

func runCheckCases(t *testing.T, cases []checkCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.description, func(t *testing.T) {
			got := Check(netip.MustParseAddr(tc.addr))
			if tc.want == "" {
				assert.Empty(t, got, "%s must be allowed", tc.addr)
				return
			}
			assert.Contains(t, got, tc.want, "%s must be refused as %q", tc.addr, tc.want)
		})
	}
}

// Every IPv4 range of the IANA special-purpose registry that is not
// globally reachable is refused, edge to edge, and the addresses just
// outside it are not.
func TestCheckRefusesTheIPv4SpecialPurposeRanges(t *testing.T) {
	runCheckCases(t, []checkCase{
		{"0.0.0.1 on this network is refused", "0.0.0.1", "this network"},
		{"0.255.255.255 the last of this network is refused", "0.255.255.255", "this network"},
		{"1.0.0.0 just after this network is allowed", "1.0.0.0", ""},
		{"9.255.255.255 just before 10/8 is allowed", "9.255.255.255", ""},
		{"10.0.0.0 the first of 10/8 is refused", "10.0.0.0", "private"},
		{"10.255.255.255 the last of 10/8 is refused", "10.255.255.255", "private"},
		{"11.0.0.0 just after 10/8 is allowed", "11.0.0.0", ""},
		{"100.63.255.255 just before shared space is allowed", "100.63.255.255", ""},
		{"100.64.0.0 the first of shared space is refused", "100.64.0.0", "private"},
		{"100.127.255.255 the last of shared space is refused", "100.127.255.255", "private"},
		{"100.128.0.0 just after shared space is allowed", "100.128.0.0", ""},
		{"126.255.255.255 just before loopback is allowed", "126.255.255.255", ""},
		{"127.0.0.0 the first of loopback is refused", "127.0.0.0", "loopback"},
		{"127.255.255.255 the last of loopback is refused", "127.255.255.255", "loopback"},
		{"128.0.0.0 just after loopback is allowed", "128.0.0.0", ""},
		{"169.253.255.255 just before link-local is allowed", "169.253.255.255", ""},
		{"169.254.0.0 the first of link-local is refused", "169.254.0.0", "link-local"},
		{"169.254.255.255 the last of link-local is refused", "169.254.255.255", "link-local"},
		{"169.255.0.0 just after link-local is allowed", "169.255.0.0", ""},
		{"172.15.255.255 just before 172.16/12 is allowed", "172.15.255.255", ""},
		{"172.16.0.0 the first of 172.16/12 is refused", "172.16.0.0", "private"},
		{"172.31.255.255 the last of 172.16/12 is refused", "172.31.255.255", "private"},
		{"172.32.0.0 just after 172.16/12 is allowed", "172.32.0.0", ""},
		{"191.255.255.255 just before the IETF protocol assignments is allowed", "191.255.255.255", ""},
		{"192.0.0.0 the first IETF protocol assignment is refused", "192.0.0.0", "IETF protocol assignment"},
		{"192.0.0.170 the NAT64 discovery address is refused", "192.0.0.170", "IETF protocol assignment"},
		{"192.0.0.255 the last IETF protocol assignment is refused", "192.0.0.255", "IETF protocol assignment"},
		{"192.0.1.0 just after the IETF protocol assignments is allowed", "192.0.1.0", ""},
		{"192.0.2.0 the first of TEST-NET-1 is refused", "192.0.2.0", "documentation"},
		{"192.0.2.255 the last of TEST-NET-1 is refused", "192.0.2.255", "documentation"},
		{"192.0.3.0 just after TEST-NET-1 is allowed", "192.0.3.0", ""},
		{"192.88.98.255 just before the 6to4 relay anycast is allowed", "192.88.98.255", ""},
		{"192.88.99.1 the 6to4 relay anycast is refused", "192.88.99.1", "6to4 relay"},
		{"192.88.99.255 the last 6to4 relay anycast is refused", "192.88.99.255", "6to4 relay"},
		{"192.88.100.0 just after the 6to4 relay anycast is allowed", "192.88.100.0", ""},
		{"192.167.255.255 just before 192.168/16 is allowed", "192.167.255.255", ""},
		{"192.168.0.0 the first of 192.168/16 is refused", "192.168.0.0", "private"},
		{"192.168.255.255 the last of 192.168/16 is refused", "192.168.255.255", "private"},
		{"192.169.0.0 just after 192.168/16 is allowed", "192.169.0.0", ""},
		{"198.17.255.255 just before benchmarking is allowed", "198.17.255.255", ""},
		{"198.18.0.0 the first benchmarking address is refused", "198.18.0.0", "benchmarking"},
		{"198.19.255.255 the last benchmarking address is refused", "198.19.255.255", "benchmarking"},
		{"198.20.0.0 just after benchmarking is allowed", "198.20.0.0", ""},
		{"198.51.99.255 just before TEST-NET-2 is allowed", "198.51.99.255", ""},
		{"198.51.100.0 the first of TEST-NET-2 is refused", "198.51.100.0", "documentation"},
		{"198.51.100.255 the last of TEST-NET-2 is refused", "198.51.100.255", "documentation"},
		{"198.51.101.0 just after TEST-NET-2 is allowed", "198.51.101.0", ""},
		{"203.0.112.255 just before TEST-NET-3 is allowed", "203.0.112.255", ""},
		{"203.0.113.0 the first of TEST-NET-3 is refused", "203.0.113.0", "documentation"},
		{"203.0.113.255 the last of TEST-NET-3 is refused", "203.0.113.255", "documentation"},
		{"203.0.114.0 just after TEST-NET-3 is allowed", "203.0.114.0", ""},
		{"223.255.255.255 just before multicast is allowed", "223.255.255.255", ""},
		{"224.0.0.0 the local network control block is refused", "224.0.0.0", "link-local"},
		{"224.0.1.0 just after the local network control block is multicast", "224.0.1.0", "multicast"},
		{"239.255.255.255 the last multicast address is refused", "239.255.255.255", "multicast"},
		{"240.0.0.0 the first reserved address is refused", "240.0.0.0", "reserved"},
		{"255.255.255.254 the last reserved address is refused", "255.255.255.254", "reserved"},
		{"255.255.255.255 the limited broadcast address is refused", "255.255.255.255", "broadcast"},
		{"192.31.196.1 AS112 is globally reachable and allowed", "192.31.196.1", ""},
		{"192.52.193.1 AMT is globally reachable and allowed", "192.52.193.1", ""},
		{"1.1.1.1 a public address is allowed", "1.1.1.1", ""},
	})
}

// The IPv6 registry's ranges that are not globally reachable are refused,
// and so is everything outside 2000::/3, where nothing is allocated for
// global unicast.
func TestCheckRefusesTheIPv6SpecialPurposeRanges(t *testing.T) {
	runCheckCases(t, []checkCase{
		{"100:: the first discard-only address is refused", "100::", "discard-only"},
		{"100::ffff:ffff:ffff:ffff the last discard-only address is refused", "100::ffff:ffff:ffff:ffff", "discard-only"},
		{"100:0:0:1:: just after discard-only is outside global unicast", "100:0:0:1::", "outside global unicast"},
		{"1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff just before global unicast is refused", "1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "outside global unicast"},
		{"2000:: the first global unicast address is allowed", "2000::", ""},
		{"2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff just before the IETF protocol assignments is allowed", "2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
		{"2001:1::1 the PCP anycast in the IETF protocol assignments is refused", "2001:1::1", "IETF protocol assignment"},
		{"2001:20::1 an ORCHIDv2 identifier is refused", "2001:20::1", "IETF protocol assignment"},
		{"2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff the last IETF protocol assignment is refused", "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", "IETF protocol assignment"},
		{"2001:200:: just after the IETF protocol assignments is allowed", "2001:200::", ""},
		{"2001:2:: the first benchmarking address is refused", "2001:2::", "benchmarking"},
		{"2001:2:0:ffff:ffff:ffff:ffff:ffff the last benchmarking address is refused", "2001:2:0:ffff:ffff:ffff:ffff:ffff", "benchmarking"},
		{"2001:db7:ffff:ffff:ffff:ffff:ffff:ffff just before documentation is allowed", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", ""},
		{"2001:db8:: the first documentation address is refused", "2001:db8::", "documentation"},
		{"2001:db8:ffff:ffff:ffff:ffff:ffff:ffff the last documentation address is refused", "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", "documentation"},
		{"2001:db9:: just after documentation is allowed", "2001:db9::", ""},
		{"3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff just before 3fff::/20 is allowed", "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
		{"3fff:: the first of 3fff::/20 documentation is refused", "3fff::", "documentation"},
		{"3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff the last of 3fff::/20 is refused", "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", "documentation"},
		{"3fff:1000:: just after 3fff::/20 is allowed", "3fff:1000::", ""},
		{"3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff the last global unicast address is allowed", "3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
		{"4000:: just after global unicast is refused", "4000::", "outside global unicast"},
		{"5f00::1 a segment routing identifier is refused", "5f00::1", "segment routing"},
		{"8000:: the upper half of the space is refused", "8000::", "outside global unicast"},
		{"fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff just before unique local is outside global unicast", "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "outside global unicast"},
		{"fc00:: the first unique local address is refused", "fc00::", "private"},
		{"fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff the last unique local address is refused", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "private"},
		{"fe00:: just after unique local is outside global unicast", "fe00::", "outside global unicast"},
		{"fe80:: the first link-local address is refused", "fe80::", "link-local"},
		{"febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff the last link-local address is refused", "febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "link-local"},
		{"fec0::1 a deprecated site-local address is refused", "fec0::1", "site-local"},
		{"feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff the last site-local address is refused", "feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "site-local"},
		{"ff01::1 interface-local multicast is refused", "ff01::1", "multicast"},
		{"ff02::1 link-local multicast is refused", "ff02::1", "link-local"},
		{"ff05::1:3 site-local multicast is refused", "ff05::1:3", "multicast"},
		{"fe80::1%eth0 a zoned link-local address is refused", "fe80::1%eth0", "link-local"},
		{"fd00::1%eth0 a zoned unique local address is refused", "fd00::1%eth0", "private"},
		{"2001:4860:4860::8888 a public address is allowed", "2001:4860:4860::8888", ""},
		{"2a00:1450:4001::1 a public address is allowed", "2a00:1450:4001::1", ""},
	})
}

// An IPv6 address that carries an IPv4 address a translator or relay
// forwards to is as good as that IPv4 address: refused if it is, allowed
// if it is public.
func TestCheckRechecksTheIPv4AddressInsideEmbeddedForms(t *testing.T) {
	runCheckCases(t, []checkCase{
		{"::ffff:10.0.0.1 mapped private is refused", "::ffff:10.0.0.1", "private"},
		{"::ffff:198.18.0.1 mapped benchmarking is refused", "::ffff:198.18.0.1", "benchmarking"},
		{"::ffff:8.8.8.8 mapped public is allowed", "::ffff:8.8.8.8", ""},

		{"64:ff9b::10.0.0.1 NAT64 of a private address is refused", "64:ff9b::10.0.0.1", "10.0.0.1 is a private address"},
		{"64:ff9b::127.0.0.1 NAT64 of loopback is refused", "64:ff9b::127.0.0.1", "loopback"},
		{"64:ff9b::169.254.169.254 NAT64 of the metadata service is refused", "64:ff9b::169.254.169.254", "metadata"},
		{"64:ff9b::198.18.0.1 NAT64 of a benchmarking address is refused", "64:ff9b::198.18.0.1", "benchmarking"},
		{"64:ff9b::ffff:ffff NAT64 of broadcast is refused", "64:ff9b::ffff:ffff", "broadcast"},
		{"64:ff9b::8.8.8.8 NAT64 of a public address is allowed", "64:ff9b::8.8.8.8", ""},
		{"64:ff9b::1:0:0 just after the NAT64 prefix is outside global unicast", "64:ff9b::1:0:0", "outside global unicast"},

		{"64:ff9b:1::10.0.0.1 local-use NAT64 of a private address is refused", "64:ff9b:1::10.0.0.1", "private"},
		{"64:ff9b:1::8.8.8.8 local-use NAT64 of a public address is allowed", "64:ff9b:1::8.8.8.8", ""},
		{"64:ff9b:1:ab::808:808 local-use NAT64 in another layout is refused though its last 32 bits are public", "64:ff9b:1:ab::808:808", "unknown layout"},
		{"64:ff9b:1:ffff:ffff:ffff:ffff:ffff the last local-use NAT64 address is refused", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", "unknown layout"},
		{"64:ff9b:2:: just after local-use NAT64 is outside global unicast", "64:ff9b:2::", "outside global unicast"},

		{"2002:a00:1:: 6to4 of a private address is refused", "2002:a00:1::", "10.0.0.1 is a private address"},
		{"2002:7f00:1::1 6to4 of loopback is refused", "2002:7f00:1::1", "loopback"},
		{"2002:c612:1:: 6to4 of a benchmarking address is refused", "2002:c612:1::", "benchmarking"},
		{"2002:a9fe:a9fe:: 6to4 of the metadata service is refused", "2002:a9fe:a9fe::", "metadata"},
		{"2002:808:808::1 6to4 of a public address is allowed", "2002:808:808::1", ""},
		{"2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff just before 6to4 is allowed", "2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", ""},
		{"2003:: just after 6to4 is allowed", "2003::", ""},

		{"Teredo with a private client is refused", "2001:0:4136:e378:8000:63bf:f5ff:fffe", "10.0.0.1 is a private address"},
		{"Teredo with the metadata service as client is refused", "2001:0:4136:e378:8000:63bf:5601:5601", "metadata"},
		{"Teredo with a private server is refused", "2001:0:a00:1:8000:63bf:f7f7:f7f7", "10.0.0.1 is a private address"},
		{"Teredo with a public server and client is allowed", "2001:0:4136:e378:8000:63bf:f7f7:f7f7", ""},
		{"2001:1:: just after Teredo is an IETF protocol assignment", "2001:1::", "IETF protocol assignment"},

		{"::10.0.0.1 IPv4-compatible private is refused", "::10.0.0.1", "10.0.0.1 is a private address"},
		{"::127.0.0.1 IPv4-compatible loopback is refused", "::127.0.0.1", "loopback"},
		{"::0.0.0.2 IPv4-compatible this network is refused", "::2", "this network"},
		{"::8.8.8.8 IPv4-compatible public is allowed", "::8.8.8.8", ""},
		{"::1:0:0 just after IPv4-compatible is outside global unicast", "::1:0:0", "outside global unicast"},
	})
}

// The table is read as data, so it is checked as data: every prefix is
// written masked (a typo'd host part would hide what it covers), none is
// listed twice, and each block is in address order as the comment says.
func TestRulesAreMaskedUniqueAndInAddressOrder(t *testing.T) {
	seen := map[netip.Prefix]bool{}
	for i, r := range rules {
		assert.Equal(t, r.prefix.Masked(), r.prefix, "%s is written masked", r.prefix)
		assert.False(t, seen[r.prefix], "%s is listed once", r.prefix)
		seen[r.prefix] = true
		assert.NotEmpty(t, r.reason, "%s has a reason", r.prefix)
		if i == 0 || rules[i-1].prefix.Addr().Is4() != r.prefix.Addr().Is4() {
			continue
		}
		prev := rules[i-1].prefix
		order := prev.Addr().Compare(r.prefix.Addr())
		assert.True(t, order < 0 || order == 0 && prev.Bits() < r.prefix.Bits(), "%s comes after %s", r.prefix, prev)
	}
}

// A dial to a NAT64 address of loopback is refused by the hook before any
// packet leaves: the translator would have connected it to 127.0.0.1.
func TestControlRefusesANAT64AddressOfLoopback(t *testing.T) {
	d := net.Dialer{Timeout: 50 * time.Millisecond, Control: Control}
	_, err := d.DialContext(context.Background(), "tcp", "[64:ff9b::7f00:1]:80")
	assert.ErrorIs(t, err, ErrForbidden)
	assert.ErrorContains(t, err, "127.0.0.1 is a loopback address")
}
