package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"go.uber.org/zap"

	"github.com/historyd/historyd/internal/server"
)

// secrets are the credentials the configuration names, loaded: the bearer tokens and the TLS
// identity; either is nil when not configured.
type secrets struct {
	tokensFile string
	tokens     *server.Tokens
	tls        *server.TLS
}

// loadCredentials reads the tokens file and the TLS files that c names.
func loadCredentials(c servingConfig) (secrets, error) {
	cr := secrets{tokensFile: c.AuthTokensFile}
	var err error
	if c.AuthTokensFile != "" {
		if cr.tokens, err = server.LoadTokensFile(c.AuthTokensFile); err != nil {
			return secrets{}, err
		}
	}
	if c.TLSCert != "" {
		if cr.tls, err = server.LoadTLS(server.TLSFiles{CertFile: c.TLSCert, KeyFile: c.TLSKey, ClientCAFile: c.TLSClientCA}); err != nil {
			return secrets{}, err
		}
	}
	return cr, nil
}

// options are the server options for the loaded credentials.
func (cr secrets) options() []server.Option {
	return []server.Option{server.WithAuthTokens(cr.tokens), server.WithTLS(cr.tls)}
}

// logFields describe the credentials in the serving line, without a secret.
func (cr secrets) logFields() []zap.Field {
	tlsMode := "off"
	if cr.tls != nil {
		tlsMode = "on"
		if cr.tls.MutualTLS() {
			tlsMode = "mutual"
		}
	}
	return []zap.Field{zap.Bool("auth", cr.tokens != nil), zap.Int("tokens", cr.tokens.Len()), zap.String("tls", tlsMode)}
}

// openToAnyone reports whether a server with these credentials on addr lets any client that reaches
// it read and change everything: no bearer tokens, no client certificates, and an address beyond
// loopback (0.0.0.0 and [::] included).
func (cr secrets) openToAnyone(addr net.Addr) bool {
	if cr.tokens != nil || (cr.tls != nil && cr.tls.MutualTLS()) {
		return false
	}
	tcp, ok := addr.(*net.TCPAddr)
	return !ok || !tcp.IP.IsLoopback()
}

// reload rereads the tokens file and the TLS files (SIGHUP). Each that fails to load keeps what it
// had, and the log says why; each that loads takes effect for the next call or handshake.
func (cr secrets) reload(logger *zap.Logger) {
	if cr.tokens == nil && cr.tls == nil {
		logger.Info("SIGHUP: nothing to reload (no --auth-tokens-file, no --tls-cert)")
		return
	}
	if cr.tokens != nil {
		if err := cr.tokens.Load(cr.tokensFile); err != nil {
			logger.Error("SIGHUP: tokens file not reloaded; the previous tokens stay in use", zap.Error(err))
		} else {
			logger.Info("SIGHUP: tokens file reloaded", zap.Int("tokens", cr.tokens.Len()))
		}
	}
	if cr.tls != nil {
		if err := cr.tls.Reload(); err != nil {
			logger.Error("SIGHUP: TLS files not reloaded; the previous certificate stays in use", zap.Error(err))
		} else {
			logger.Info("SIGHUP: TLS files reloaded")
		}
	}
}

// errServeEnded is the failure of a gRPC Serve that returned without an error before shutdown.
var errServeEnded = errors.New("the gRPC server stopped serving")

// awaitStop waits while the server serves: it reloads the credentials on each SIGHUP and returns
// nil when ctx ends (the first SIGINT or SIGTERM), or an error when Serve returned on its own.
func awaitStop(ctx context.Context, sig signals, served <-chan error, cr secrets, logger *zap.Logger) error {
	for {
		select {
		case <-sig.reload:
			cr.reload(logger)
		case <-ctx.Done():
			return nil
		case err := <-served:
			if err == nil {
				err = errServeEnded
			}
			return err
		}
	}
}

// Timeouts of the metrics listener: a scrape is small and local; a client that is slower than this
// is holding a connection, not scraping.
const (
	metricsReadHeaderTimeout = 5 * time.Second
	metricsWriteTimeout      = 30 * time.Second
	metricsIdleTimeout       = 2 * time.Minute
)

// startMetrics adds the metrics of the branch store (and of its storage, for the sqlite engine)
// and the Exchange to m, listens on addr and serves m at /metrics until stopped.
func startMetrics(addr string, m *server.Metrics, branches *engine, ex server.ExchangeStats, logger *zap.Logger) (*httpListener, error) {
	if err := m.WatchStore(branches.stats); err != nil {
		return nil, err
	}
	if branches.storage != nil {
		if err := m.WatchStorage(branches.storage); err != nil {
			return nil, err
		}
	}
	if err := m.WatchExchange(ex); err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	return listenHTTP(addr, &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: metricsReadHeaderTimeout,
		WriteTimeout:      metricsWriteTimeout,
		IdleTimeout:       metricsIdleTimeout,
		ErrorLog:          zap.NewStdLog(logger.Named("metrics")),
	})
}

// metricsStopTimeout is how long stopMetrics lets a scrape in progress finish: a scrape of this
// registry takes milliseconds, so a second is only ever waited by a client that stopped reading.
const metricsStopTimeout = time.Second

// stopMetrics stops the metrics listener, letting a scrape in progress finish for at most
// metricsStopTimeout.
func stopMetrics(ms *httpListener) {
	ctx, cancel := context.WithTimeout(context.Background(), metricsStopTimeout)
	defer cancel()
	_ = ms.stop(ctx) // the process is exiting; a scrape cut short is retried by Prometheus
}
