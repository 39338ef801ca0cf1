package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/production-go/gateway-lab/internal/testkit"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// redisServer is a redis-server of one test's own, so the test may stop it
// (a Redis outage) and start it again on the same port (its recovery).
type redisServer struct {
	t    *testing.T
	port int
	url  string
	cmd  *exec.Cmd
	done chan struct{}
}

// startRedis starts redis-server on a free loopback port. Without
// redis-server on PATH the test skips — unless REDIS_INTEGRATION_REQUIRED=1.
func startRedis(t *testing.T) *redisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("REDIS_INTEGRATION_REQUIRED") == "1" {
			t.Fatal("redis-server is not on PATH and REDIS_INTEGRATION_REQUIRED=1")
		}
		t.Skip("redis-server is not on PATH: the outage test needs a Redis of its own to stop")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	s := &redisServer{t: t, port: port, url: fmt.Sprintf("redis://127.0.0.1:%d/0", port)}
	s.restart()
	t.Cleanup(s.stop)
	return s
}

// restart starts the server (again) and waits until it accepts connections.
func (s *redisServer) restart() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--port", fmt.Sprint(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	require.NoError(s.t, s.cmd.Start())
	s.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.cmd, s.done)
	require.Eventually(s.t, func() bool {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", s.port), 100*time.Millisecond)
		if err != nil {
			return false
		}
		_ = c.Close()
		return true
	}, 10*time.Second, 20*time.Millisecond, "redis-server did not start on port %d", s.port)
}

// stop kills the server and waits for it to exit. Safe to call twice.
func (s *redisServer) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// tlsClusterNode is a one-node Redis Cluster of one test's own that speaks
// only TLS (with a CA of the test's own) and wants a password.
type tlsClusterNode struct {
	addr, caFile string
}

// startTLSClusterNode starts it and gives it every slot. Without
// redis-server on PATH, or one built without TLS, the test skips — unless
// REDIS_INTEGRATION_REQUIRED=1.
func startTLSClusterNode(t *testing.T, password string) tlsClusterNode {
	t.Helper()
	skip := func(format string, args ...any) {
		t.Helper()
		if os.Getenv("REDIS_INTEGRATION_REQUIRED") == "1" {
			t.Fatalf(format+" (REDIS_INTEGRATION_REQUIRED=1)", args...)
		}
		t.Skipf(format, args...)
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		skip("redis-server is not on PATH: the TLS cluster test needs one of its own")
	}
	dir := t.TempDir()
	caFile, certFile, keyFile := writeTestPKI(t, dir)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	cmd := exec.Command(bin, "--port", "0", "--tls-port", fmt.Sprint(port), "--bind", "127.0.0.1",
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-ca-cert-file", caFile, "--tls-auth-clients", "no",
		"--tls-cluster", "yes", "--cluster-enabled", "yes", "--cluster-announce-ip", "127.0.0.1", "--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--requirepass", password, "--masterauth", password, "--dir", dir, "--save", "", "--appendonly", "no")
	var out testkit.LogBuffer // the server writes it, the test reads it
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })

	pem, err := os.ReadFile(caFile)
	require.NoError(t, err)
	roots := x509.NewCertPool()
	require.True(t, roots.AppendCertsFromPEM(pem))
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1,
		TLSConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}})
	defer func() { _ = c.Close() }()
	exited := func() bool {
		select {
		case <-done:
			return true
		default:
			return false
		}
	}
	require.Eventually(t, func() bool { return exited() || c.Ping(t.Context()).Err() == nil },
		10*time.Second, 20*time.Millisecond, "the TLS node did not answer: %s", &out)
	if exited() {
		skip("redis-server would not start with TLS (built without it?): %s", out.String())
	}
	require.NoError(t, c.Do(t.Context(), "CLUSTER", "ADDSLOTSRANGE", 0, 16383).Err())
	require.Eventually(t, func() bool {
		info, err := c.ClusterInfo(t.Context()).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	}, 10*time.Second, 50*time.Millisecond, "the one-node cluster did not come up")
	return tlsClusterNode{addr: addr, caFile: caFile}
}

// writeTestPKI writes a CA and a certificate for 127.0.0.1 it signed.
func writeTestPKI(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "secure_app test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	write := func(name, typ string, b []byte) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b}), 0o600))
		return p
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("node.pem", "CERTIFICATE", der), write("node.key", "PRIVATE KEY", keyDER)
}
