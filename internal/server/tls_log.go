package server

import (
	"net"
	"sync"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/credentials"
)

// handshakeLogInterval is the least time between two "TLS handshake failed" lines: a client that
// retries without a certificate, or a port scanner, would otherwise write a line per attempt.
const handshakeLogInterval = time.Second

// handshakeLog wraps the server's TLS credentials so that a failed handshake (a mutual-TLS client
// without a certificate, an expired or unknown certificate, a plaintext client) is logged at warn,
// at most once per handshakeLogInterval, with the number of failures not logged since the previous
// line (issue 19). grpc-go itself reports them only through grpclog, which historyd does not
// install.
type handshakeLog struct {
	credentials.TransportCredentials
	limiter *handshakeLimiter
}

type handshakeLimiter struct {
	logger *zap.Logger
	now    func() time.Time

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func logHandshakeFailures(c credentials.TransportCredentials, logger *zap.Logger) credentials.TransportCredentials {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &handshakeLog{TransportCredentials: c, limiter: &handshakeLimiter{logger: logger, now: time.Now}}
}

func (h *handshakeLog) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := h.TransportCredentials.ServerHandshake(conn)
	if err != nil {
		h.limiter.failed(conn.RemoteAddr(), err)
	}
	return c, info, err
}

func (h *handshakeLog) Clone() credentials.TransportCredentials {
	return &handshakeLog{TransportCredentials: h.TransportCredentials.Clone(), limiter: h.limiter}
}

// failed logs one failure, or counts it when a line was written less than handshakeLogInterval ago.
func (l *handshakeLimiter) failed(remote net.Addr, err error) {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < handshakeLogInterval {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	addr := ""
	if remote != nil {
		addr = remote.String()
	}
	l.logger.Warn("TLS handshake failed", zap.String("peer.address", addr), zap.Error(err),
		zap.Int("suppressed_since_last", suppressed))
}
