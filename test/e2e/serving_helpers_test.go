//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
)

// Helpers of the issue 7 end-to-end tests (hostile_test.go, shutdown_test.go, metrics_test.go):
// bearer tokens, the metrics endpoint, the test-hook service, log lines and certificates.

// withToken returns ctx carrying `authorization: Bearer tok`.
func withToken(ctx context.Context, tok string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
}

// writeTokens writes a tokens file holding toks and returns its path.
func writeTokens(t *testing.T, path string, toks ...string) string {
	t.Helper()
	content := "# historyd e2e tokens\n" + strings.Join(toks, "\n") + "\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// logAddress returns the address field of p's first log line with message msg.
func logAddress(t *testing.T, p *proc, msg string) string {
	t.Helper()
	for _, line := range p.stderr.Lines() {
		var e struct{ Msg, Address string }
		if json.Unmarshal([]byte(line), &e) == nil && e.Msg == msg {
			return e.Address
		}
	}
	t.Fatalf("no %q line in the log:\n%s", msg, strings.Join(p.stderr.Lines(), "\n"))
	return ""
}

// waitLog waits until one of p's log lines after the first skip lines contains every one of subs,
// and returns it; the ticker paces the checks, the deadline bounds them.
func waitLog(t *testing.T, p *proc, skip int, subs ...string) string {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(startTimeout)
	defer deadline.Stop()
	for {
		lines := p.stderr.Lines()
		for _, line := range lines[min(skip, len(lines)):] {
			all := true
			for _, s := range subs {
				all = all && strings.Contains(line, s)
			}
			if all {
				return line
			}
		}
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("no log line with %q within %v:\n%s", subs, startTimeout, strings.Join(lines, "\n"))
		}
	}
}

// series is a scrape of the metrics endpoint: each sample's `name{labels}` text and its value.
type series map[string]float64

// scrape fetches http://addr/metrics and parses the Prometheus text format.
func scrape(t *testing.T, addr string) series {
	t.Helper()
	s, err := readMetrics(addr)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// readMetrics is scrape for a caller that cannot stop the test at a failure (the crash harness,
// with writers running).
func readMetrics(addr string) (series, error) {
	client := &http.Client{Timeout: startTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("scraping %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping %s: %s", addr, resp.Status)
	}
	return parseSeries(string(body))
}

// parseMetrics parses the samples of the Prometheus text format.
func parseMetrics(t *testing.T, body string) series {
	t.Helper()
	s, err := parseSeries(body)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func parseSeries(body string) (series, error) {
	s := series{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if i < 0 || err != nil {
			return nil, fmt.Errorf("metrics line %q: %v", line, err)
		}
		s[line[:i]] = v
	}
	return s, sc.Err()
}

// get returns the sum of the samples of metric name whose labels include every `k="v"` of labels,
// and whether there was one.
func (s series) get(name string, labels ...string) (float64, bool) {
	sum, found := 0.0, false
	for key, v := range s {
		n, rest, _ := strings.Cut(key, "{")
		if n != name {
			continue
		}
		match := true
		for _, l := range labels {
			match = match && strings.Contains(rest, l)
		}
		if match {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// testHook calls a unary method of the test-hook service (testhookBin only).
func testHook(ctx context.Context, conn *grpc.ClientConn, method string) error {
	return conn.Invoke(ctx, "/historyd.testhook.TestHook/"+method, new(emptypb.Empty), new(emptypb.Empty))
}

// testCA is a certificate authority made for one test with crypto/x509.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "historyd e2e CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key}
}

// writePEM writes the CA certificate into dir and returns its path.
func (ca *testCA) writePEM(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// issue writes a certificate for name ("localhost" for a server) valid from notBefore to notAfter
// and its key into dir, and returns their paths.
func (ca *testCA) issue(t *testing.T, dir, name string, server bool, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name},
		NotBefore: notBefore, NotAfter: notAfter, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage, tmpl.DNSNames = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+".key")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// dialTLS returns a client connection to addr over TLS, trusting the CA in caFile and presenting
// the client certificate, closed at the end of the test.
func dialTLS(t *testing.T, addr, caFile, certFile, keyFile string) *grpc.ClientConn {
	t.Helper()
	caPEM, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{RootCAs: pool, ServerName: "localhost", Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// rawCodec sends a *[]byte request exactly as given, so a test can put on the wire what no protobuf
// library would encode (invalid UTF-8 in a string field), and reads responses as raw bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("rawCodec: %T", v)
	}
	return *b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	b, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("rawCodec: %T", v)
	}
	*b = append((*b)[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }
