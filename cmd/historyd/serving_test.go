package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/server"
	"github.com/historyd/historyd/internal/store"
)

// TestLoadCredentials: the configured files are loaded; a missing or invalid one is an error at
// start, never a server that runs without the protection it was asked for.
func TestLoadCredentials(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := selfSigned(t, dir)
	tokensFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokensFile, []byte("# ops\nload-credentials-token-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cr, err := loadCredentials(servingConfig{AuthTokensFile: tokensFile, TLSCert: certFile, TLSKey: keyFile})
	if err != nil {
		t.Fatalf("loadCredentials: %v", err)
	}
	if cr.tokens.Len() != 1 || cr.tls == nil {
		t.Errorf("credentials = %+v, want one token and TLS", cr)
	}
	cr, err = loadCredentials(servingConfig{})
	if err != nil || cr.tokens != nil || cr.tls != nil {
		t.Errorf("loadCredentials of nothing = %+v, %v", cr, err)
	}
	for name, c := range map[string]servingConfig{
		"missing tokens file": {AuthTokensFile: filepath.Join(dir, "nope")},
		"empty tokens file":   {AuthTokensFile: certFile}, // a PEM file has no valid token line
		"missing key":         {TLSCert: certFile, TLSKey: filepath.Join(dir, "nope")},
	} {
		if _, err := loadCredentials(c); err == nil {
			t.Errorf("%s: loadCredentials succeeded", name)
		}
	}
}

// TestReloadLogs: a reload logs what it did; a bad tokens file keeps the old tokens and the log
// says why (issue 7: "a bad reload keeps the old tokens and logs why").
func TestReloadLogs(t *testing.T) {
	dir := t.TempDir()
	tokensFile := filepath.Join(dir, "tokens")
	const tok = "reload-logs-token-0123456789"
	if err := os.WriteFile(tokensFile, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cr, err := loadCredentials(servingConfig{AuthTokensFile: tokensFile})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	logger := zap.New(core)

	if err := os.WriteFile(tokensFile, []byte("too-short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cr.reload(logger)
	bad := logs.FilterMessageSnippet("not reloaded").All()
	if len(bad) != 1 || bad[0].Level != zapcore.ErrorLevel || !strings.Contains(bad[0].ContextMap()["error"].(string), "line 1") {
		t.Fatalf("log after a bad reload = %v, want one error line naming the bad line", logs.All())
	}
	if cr.tokens.Len() != 1 {
		t.Errorf("after a bad reload the tokens are %d, want the old one", cr.tokens.Len())
	}
	if err := os.WriteFile(tokensFile, []byte(tok+"\nsecond-reload-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cr.reload(logger)
	if got := logs.FilterMessage("SIGHUP: tokens file reloaded").All(); len(got) != 1 || got[0].ContextMap()["tokens"] != int64(2) {
		t.Errorf("log after a good reload = %v", logs.All())
	}
	secrets{}.reload(logger)
	if len(logs.FilterMessageSnippet("nothing to reload").All()) != 1 {
		t.Errorf("reload with nothing configured did not say so: %v", logs.All())
	}
}

// TestMetricsListener: --metrics-addr serves the registry at /metrics, nothing else, and stops
// cleanly (issue 7: "Prometheus on a separate HTTP listener").
func TestMetricsListener(t *testing.T) {
	m := server.NewMetrics()
	ex := exchange.Memory()
	defer ex.Close()
	ms, err := startMetrics("127.0.0.1:0", m, &engine{stats: store.NewMemory()}, ex, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}} // no idle goroutines for goleak
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get("http://" + ms.addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	code, body := get("/metrics")
	if strings.Contains(body, "historyd_store_wal_bytes") {
		t.Error("the memory engine has storage metrics (issue 15: sqlite only)")
	}
	for _, want := range []string{"go_memstats_heap_alloc_bytes", "historyd_branches 0", "historyd_exchange_owners 0"} {
		if code != http.StatusOK || !strings.Contains(body, want) {
			t.Errorf("/metrics = %d without %q", code, want)
		}
	}
	if code, _ := get("/"); code != http.StatusNotFound {
		t.Errorf("/ = %d, want 404", code)
	}
	if err := ms.stop(context.Background()); err != nil {
		t.Errorf("stop: %v", err)
	}
	if _, err := client.Get("http://" + ms.addr() + "/metrics"); err == nil {
		t.Error("the metrics listener still answers after stop")
	}
}

// TestOpenToAnyone: historyd warns when it serves beyond loopback with neither bearer tokens nor
// client certificates (README "Security"): any client that reaches it could read and change every
// history.
func TestOpenToAnyone(t *testing.T) {
	tokens, err := server.NewTokens("0123456789abcdef0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	tcp := func(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 50051} }
	for _, tc := range []struct {
		name string
		cr   secrets
		addr net.Addr
		want bool
	}{
		{"loopback v4", secrets{}, tcp("127.0.0.1"), false},
		{"loopback v6", secrets{}, tcp("::1"), false},
		{"every interface", secrets{}, tcp("0.0.0.0"), true},
		{"every interface v6", secrets{}, tcp("::"), true},
		{"a private address", secrets{}, tcp("10.0.0.7"), true},
		{"every interface with tokens", secrets{tokens: tokens}, tcp("0.0.0.0"), false},
	} {
		if got := tc.cr.openToAnyone(tc.addr); got != tc.want {
			t.Errorf("%s: openToAnyone = %v, want %v", tc.name, got, tc.want)
		}
	}
}
