package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/historyd/historyd/internal/server"
)

// startTestServer serves a server.New(opts) on a free local port until the test ends.
func startTestServer(t *testing.T, opts ...server.Option) (*server.Server, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(nil, opts...)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		_ = srv.Shutdown(context.Background())
		<-served
	})
	return srv, lis.Addr().String()
}

// selfSigned writes a self-signed server certificate for "localhost" and its key into dir and
// returns their paths.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		DNSNames: []string{"localhost"}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestHealthcheck: `historyd healthcheck` exits 0 only when the server answers SERVING; NOT_SERVING,
// an unreachable server and a TLS mismatch exit 1; bad flags exit 2 (issue 7: "calls
// grpc.health.v1 and exits 0 only on SERVING").
func TestHealthcheck(t *testing.T) {
	plain, plainAddr := startTestServer(t)
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir)
	id, err := server.LoadTLS(server.TLSFiles{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	_, tlsAddr := startTestServer(t, server.WithTLS(id), server.WithAuthTokens(mustServerTokens(t)))
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := closed.Addr().String()
	closed.Close()
	otherCert, _ := selfSigned(t, t.TempDir())

	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		before func()
		code   int
		out    string
	}{
		{name: "serving", args: []string{"--addr", plainAddr}, code: 0, out: "SERVING"},
		{name: "tls with its CA", args: []string{"--addr", tlsAddr, "--tls-ca", certFile, "--tls-server-name", "localhost"}, code: 0, out: "SERVING"},
		{name: "tls server, plaintext check", args: []string{"--addr", tlsAddr, "--timeout", "2s"}, code: 1, out: "UNHEALTHY"},
		{name: "tls, unknown CA", args: []string{"--addr", tlsAddr, "--tls"}, code: 1, out: "UNHEALTHY"},
		{name: "unreachable", args: []string{"--addr", deadAddr, "--timeout", "2s"}, code: 1, out: "UNHEALTHY"},
		{name: "unknown service", args: []string{"--addr", plainAddr, "--service", "nope"}, code: 1, out: "NotFound"},
		// issue 19: healthcheck honours the server's HISTORYD_* variables.
		{name: "HISTORYD_LISTEN is the address", env: map[string]string{"HISTORYD_LISTEN": plainAddr}, code: 0, out: "SERVING"},
		{name: "HISTORYD_LISTEN is not 50051", env: map[string]string{"HISTORYD_LISTEN": deadAddr}, args: []string{"--timeout", "2s"}, code: 1, out: "UNHEALTHY"},
		{name: "wildcard host checked on loopback", env: map[string]string{"HISTORYD_LISTEN": "0.0.0.0:" + port(t, plainAddr)}, code: 0, out: "SERVING"},
		{name: "empty host checked on loopback", env: map[string]string{"HISTORYD_LISTEN": ":" + port(t, plainAddr)}, code: 0, out: "SERVING"},
		{name: "--addr wins over HISTORYD_LISTEN", env: map[string]string{"HISTORYD_LISTEN": deadAddr}, args: []string{"--addr", plainAddr}, code: 0, out: "SERVING"},
		{name: "port 0 is a usage error", env: map[string]string{"HISTORYD_LISTEN": "127.0.0.1:0"}, code: 2},
		{name: "--addr bogus is a usage error", args: []string{"--addr", "bogus"}, code: 2},
		{name: "HISTORYD_TLS_CERT: TLS, pinned to the server's certificate", env: map[string]string{"HISTORYD_LISTEN": tlsAddr, "HISTORYD_TLS_CERT": certFile, "HISTORYD_TLS_KEY": keyFile}, code: 0, out: "SERVING"},
		{name: "HISTORYD_TLS_CERT: another certificate is refused", env: map[string]string{"HISTORYD_LISTEN": tlsAddr, "HISTORYD_TLS_CERT": otherCert, "HISTORYD_TLS_KEY": keyFile}, args: []string{"--timeout", "2s"}, code: 1, out: "UNHEALTHY"},
		{
			name: "not serving", args: []string{"--addr", plainAddr},
			before: func() { plain.Health().SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING) },
			code:   1, out: "NOT_SERVING",
		},
		{name: "bad flag", args: []string{"--port", "1"}, code: 2},
		{name: "zero timeout", args: []string{"--timeout", "0s"}, code: 2},
		{name: "cert without key", args: []string{"--tls-cert", certFile}, code: 2},
		{name: "argument", args: []string{"now"}, code: 2},
		{name: "help", args: []string{"-h"}, code: 0, out: "HISTORYD_LISTEN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.before != nil {
				tc.before()
			}
			var stdout, stderr strings.Builder
			code := healthcheck(context.Background(), tc.args, envOf(tc.env), &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.code, stdout.String(), stderr.String())
			}
			if !strings.Contains(stdout.String(), tc.out) {
				t.Errorf("stdout %q, want it to contain %q", stdout.String(), tc.out)
			}
		})
	}
}

// TestRunHealthcheckSubcommand: `historyd healthcheck ...` is dispatched by run, so main needs no
// logic of its own.
func TestRunHealthcheckSubcommand(t *testing.T) {
	_, addr := startTestServer(t)
	var out strings.Builder
	if code := run(context.Background(), []string{"healthcheck", "--addr", addr}, envOf(nil), &out); code != 0 {
		t.Errorf("run(healthcheck) = %d, want 0; %q", code, out.String())
	}
}

// port returns the port of a host:port address.
func port(t *testing.T, addr string) string {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestHealthcheckAddrErrors: the usage errors name the address's source and say what to give
// (issue 19: "port 0 is a usage error saying so").
func TestHealthcheckAddrErrors(t *testing.T) {
	for _, tc := range []struct {
		env         map[string]string
		args        []string
		wantInError string
	}{
		{map[string]string{"HISTORYD_LISTEN": ":0"}, nil, "port 0"},
		{nil, []string{"--addr", "bogus"}, "127.0.0.1:50051"},
		{nil, []string{"--addr", "127.0.0.1:99999"}, "99999"},
		{nil, []string{"--timeout", "0s"}, "--timeout 0s"},
	} {
		var stdout, stderr strings.Builder
		if code := healthcheck(context.Background(), tc.args, envOf(tc.env), &stdout, &stderr); code != 2 {
			t.Errorf("healthcheck(%q, %v) = %d, want 2", tc.args, tc.env, code)
		}
		if lines := strings.Split(strings.TrimSpace(stderr.String()), "\n"); len(lines) != 1 || !strings.Contains(lines[0], tc.wantInError) {
			t.Errorf("healthcheck(%q, %v) stderr %q, want one line containing %q", tc.args, tc.env, stderr.String(), tc.wantInError)
		}
	}
}

func mustServerTokens(t *testing.T) *server.Tokens {
	t.Helper()
	tokens, err := server.NewTokens("healthcheck-test-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}
