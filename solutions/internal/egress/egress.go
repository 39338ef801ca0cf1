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

// sharedSpace is 100.64.0.0/10 (RFC 6598, carrier-grade NAT), which the
// netip predicates do not cover.
var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// Check reports why ip must not be dialled, or "" if it may be.
func Check(ip netip.Addr) string {
	ip = ip.Unmap()
	for _, m := range metadata {
		if ip == m {
			return "a cloud metadata address"
		}
	}
	switch {
	case !ip.IsValid():
		return "not an IP address"
	case ip.IsLoopback():
		return "a loopback address"
	case ip.IsPrivate(), sharedSpace.Contains(ip):
		return "a private address"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "a link-local address"
	case ip.IsUnspecified():
		return "the unspecified address"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "a multicast address"
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
