package server

import (
	"net"
	"sync"
	"sync/atomic"
)

// DefaultMaxConnections is the default of Limits.MaxConnections: 1024 client connections, far
// above what the clients of one history server open (a gRPC client multiplexes all its calls over
// one connection). Each open connection costs its HTTP/2 buffers and goroutines even when idle, and
// a file descriptor, so the cap bounds those too.
const DefaultMaxConnections = 1024

// limitListener accepts at most max open connections. A connection past the cap is closed at once,
// before the TLS or HTTP/2 handshake, rather than left waiting in the kernel's accept queue as
// golang.org/x/net/netutil.LimitListener leaves it: a client that is refused learns it at once
// (UNAVAILABLE; gRPC clients retry with backoff, and a load balancer tries another replica), a
// queued one would hang until its own timeout with its connection counted against the kernel's
// backlog, and under a flood the queue would only fill again (ADR-0009).
type limitListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	metrics *Metrics // nil: no metrics
}

// limitConnections returns lis capped at max open connections (max <= 0: lis unchanged).
func limitConnections(lis net.Listener, max int, m *Metrics) net.Listener {
	if max <= 0 {
		return lis
	}
	return &limitListener{Listener: lis, max: int64(max), metrics: m}
}

// Accept returns the next connection within the cap, closing those past it as they come.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) > l.max {
			l.open.Add(-1)
			// Counted before the close: a client that has read the close sees the refusal in
			// the metrics (TestLimitListener read it first, once, under load).
			l.metrics.connectionRefused()
			_ = c.Close()
			continue
		}
		l.metrics.connectionOpened(1)
		return &limitConn{Conn: c, l: l}, nil
	}
}

// limitConn gives its place back when closed, once however often Close is called.
type limitConn struct {
	net.Conn
	l    *limitListener
	once sync.Once
}

// Close closes the connection and frees its place under the cap.
func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.metrics.connectionOpened(-1)
	})
	return err
}
