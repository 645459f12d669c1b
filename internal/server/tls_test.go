package server

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a leaf certificate and key in PEM, valid from notBefore to notAfter, for a server
// (DNS name "localhost") or a client.
func (ca *testCA) issue(t *testing.T, cn string, server bool, notBefore, notAfter time.Time) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// clientTLS returns client credentials trusting ca, presenting the given certificate if any.
func clientTLS(t *testing.T, ca *testCA, certPEM, keyPEM []byte) grpc.DialOption {
	t.Helper()
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12}
	if certPEM != nil {
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
}

// TestMutualTLS: with a client CA, a client certificate from that CA and valid now is accepted;
// none, an expired one, one not yet valid and one from another CA fail the handshake, so the call
// is UNAVAILABLE and never reaches a handler (issue 7: "TLS and mutual TLS", and the hostile
// client's expired certificate).
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := newTestCA(t, "historyd test CA"), newTestCA(t, "another CA")
	now := time.Now()
	srvCert, srvKey := ca.issue(t, "historyd", true, now.Add(-time.Hour), now.Add(time.Hour))
	writeFile(t, filepath.Join(dir, "server.pem"), srvCert)
	writeFile(t, filepath.Join(dir, "server.key"), srvKey)
	writeFile(t, filepath.Join(dir, "ca.pem"), ca.pem)
	id, err := LoadTLS(TLSFiles{
		CertFile: filepath.Join(dir, "server.pem"), KeyFile: filepath.Join(dir, "server.key"),
		ClientCAFile: filepath.Join(dir, "ca.pem"),
	})
	if err != nil {
		t.Fatalf("LoadTLS: %v", err)
	}
	if !id.MutualTLS() {
		t.Error("MutualTLS() = false with a client CA file")
	}
	ts := newTestServer(t, registerProbe, WithTLS(id))

	goodCert, goodKey := ca.issue(t, "client", false, now.Add(-time.Hour), now.Add(time.Hour))
	expCert, expKey := ca.issue(t, "expired", false, now.Add(-48*time.Hour), now.Add(-24*time.Hour))
	futCert, futKey := ca.issue(t, "future", false, now.Add(24*time.Hour), now.Add(48*time.Hour))
	othCert, othKey := other.issue(t, "stranger", false, now.Add(-time.Hour), now.Add(time.Hour))
	tests := []struct {
		name      string
		cert, key []byte
		code      codes.Code
	}{
		{"valid client certificate", goodCert, goodKey, codes.OK},
		{"no client certificate", nil, nil, codes.Unavailable},
		{"expired", expCert, expKey, codes.Unavailable},
		{"not yet valid", futCert, futKey, codes.Unavailable},
		{"other CA", othCert, othKey, codes.Unavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			conn := ts.dial(t, clientTLS(t, ca, tc.cert, tc.key))
			err := callProbeUnary(testContext(t), conn, "ok")
			if got := status.Code(err); got != tc.code {
				t.Errorf("call = %v, want %v", err, tc.code)
			}
		})
	}
	if n := len(ts.logs.FilterMessage("finished call").All()); n != 1 {
		t.Errorf("%d calls reached the chain, want only the one with a valid certificate", n)
	}
	// A plaintext client cannot talk to a TLS server either.
	if err := callProbeUnary(testContext(t), ts.conn, "ok"); status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext call = %v, want UNAVAILABLE", err)
	}
}

// TestTLSReload: Reload switches to new files for the next handshake; files that do not load keep
// the identity in use (issue 7: "reloaded on SIGHUP too").
func TestTLSReload(t *testing.T) {
	dir := t.TempDir()
	certPath, keyPath := filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key")
	first, second := newTestCA(t, "first CA"), newTestCA(t, "second CA")
	now := time.Now()
	c1, k1 := first.issue(t, "historyd", true, now.Add(-time.Hour), now.Add(time.Hour))
	writeFile(t, certPath, c1)
	writeFile(t, keyPath, k1)
	id, err := LoadTLS(TLSFiles{CertFile: certPath, KeyFile: keyPath})
	if err != nil {
		t.Fatalf("LoadTLS: %v", err)
	}
	if id.MutualTLS() {
		t.Error("MutualTLS() = true without a client CA file")
	}
	ts := newTestServer(t, registerProbe, WithTLS(id))
	call := func(ca *testCA) error {
		return callProbeUnary(testContext(t), ts.dial(t, clientTLS(t, ca, nil, nil)), "ok")
	}
	if err := call(first); err != nil {
		t.Fatalf("call trusting the first CA: %v", err)
	}

	writeFile(t, keyPath, []byte("not a key")) // a half-finished rotation
	if err := id.Reload(); err == nil {
		t.Fatal("Reload with a bad key succeeded")
	}
	if err := call(first); err != nil {
		t.Errorf("after a failed reload, call trusting the first CA: %v", err)
	}

	c2, k2 := second.issue(t, "historyd", true, now.Add(-time.Hour), now.Add(time.Hour))
	writeFile(t, certPath, c2)
	writeFile(t, keyPath, k2)
	if err := id.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	if err := call(second); err != nil {
		t.Errorf("after the reload, call trusting the second CA: %v", err)
	}
	if err := call(first); status.Code(err) != codes.Unavailable {
		t.Errorf("after the reload, call trusting only the first CA = %v, want UNAVAILABLE", err)
	}
}

// TestLoadTLSErrors: missing files and a client CA file without certificates are errors.
func TestLoadTLSErrors(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t, "CA")
	c, k := ca.issue(t, "historyd", true, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	writeFile(t, filepath.Join(dir, "c.pem"), c)
	writeFile(t, filepath.Join(dir, "k.pem"), k)
	writeFile(t, filepath.Join(dir, "empty-ca.pem"), []byte("no certificates here\n"))
	if _, err := LoadTLS(TLSFiles{CertFile: filepath.Join(dir, "missing.pem"), KeyFile: filepath.Join(dir, "k.pem")}); err == nil {
		t.Error("LoadTLS with a missing certificate succeeded")
	}
	if _, err := LoadTLS(TLSFiles{CertFile: filepath.Join(dir, "c.pem"), KeyFile: filepath.Join(dir, "k.pem"),
		ClientCAFile: filepath.Join(dir, "missing-ca.pem")}); err == nil {
		t.Error("LoadTLS with a missing client CA file succeeded")
	}
	_, err := LoadTLS(TLSFiles{CertFile: filepath.Join(dir, "c.pem"), KeyFile: filepath.Join(dir, "k.pem"),
		ClientCAFile: filepath.Join(dir, "empty-ca.pem")})
	if !errors.Is(err, ErrNoClientCAs) {
		t.Errorf("LoadTLS with an empty client CA file = %v, want ErrNoClientCAs", err)
	}
}
