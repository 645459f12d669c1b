package server

import (
	"time"

	"go.uber.org/zap"
)

// DefaultGracePeriod is how long Shutdown lets in-flight RPCs finish before it cuts them off. Ten
// seconds covers any unary call of this in-memory service many times over and stays well inside the
// 30 s a Kubernetes pod gets between SIGTERM and SIGKILL by default.
const DefaultGracePeriod = 10 * time.Second

// Option configures a Server built by New.
type Option func(*options)

type options struct {
	gracePeriod time.Duration
	limits      Limits   // limits.go
	tokens      *Tokens  // auth.go; nil: no authentication
	tls         *TLS     // tls.go; nil: plaintext
	metrics     *Metrics // metrics.go; nil: no metrics

	inflight *inflight    // inflight.go; set by New, which owns it
	tap      *callTap     // tap.go; set by New
	streams  *openStreams // revoke.go; set by New
	logger   *zap.Logger  // set by New: TLS handshake failures are logged to it (tls_log.go)
}

func defaultOptions() options {
	return options{gracePeriod: DefaultGracePeriod, limits: DefaultLimits()}
}

// WithGracePeriod sets how long Shutdown waits for in-flight RPCs and open streams to end after
// health has gone NOT_SERVING and the OnShutdown hooks have run, before it stops the server
// forcibly. The default is DefaultGracePeriod; a negative value is treated as zero (stop at once).
func WithGracePeriod(d time.Duration) Option {
	return func(o *options) {
		o.gracePeriod = max(d, 0)
	}
}
