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
