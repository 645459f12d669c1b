//go:build e2e

package e2e

import (
	"context"
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/historyd/historyd/internal/store/postgres/pgtest"
)

// pgProxy is the "small TCP proxy written in the test, which the test cuts and restores" of issue
// 16's Faults bullet: historyd's --postgres-url names the proxy, which relays each connection to
// PostgreSQL. cut closes every relayed connection, both ends (historyd sees its connections drop;
// PostgreSQL sees its clients leave and rolls back what they had open), and from then on closes
// each new connection as soon as it is accepted, so that historyd's reconnections fail at once
// rather than hang; restore relays again. The listener stays bound throughout, so the URL keeps
// naming the same port.
type pgProxy struct {
	ln       net.Listener
	target   string         // PostgreSQL's host:port
	wg       sync.WaitGroup // the accept loop and every relay: close waits for them
	arrivals chan struct{}  // cap 1: nudged at each connection accepted, for waitFor

	mu      sync.Mutex
	open    bool                  // relaying (restore) or refusing (cut)
	closed  bool                  // close was called
	conns   map[net.Conn]struct{} // both ends of every relayed connection
	relayed int                   // connections relayed
	refused int                   // connections closed on arrival while cut
}

// newPGProxy starts a proxy to target (host:port), relaying (open) or refusing; it is closed, its
// goroutines ended, when t ends.
func newPGProxy(t *testing.T, target string, open bool) *pgProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	p := &pgProxy{ln: ln, target: target, open: open, conns: map[net.Conn]struct{}{}, arrivals: make(chan struct{}, 1)}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// addr is the proxy's host:port.
func (p *pgProxy) addr() string { return p.ln.Addr().String() }

// accept runs until close closes the listener.
func (p *pgProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		open := p.open
		if open {
			p.conns[c] = struct{}{}
			p.relayed++
		} else {
			p.refused++
		}
		p.mu.Unlock()
		if open {
			p.wg.Go(func() { p.relay(c) })
		} else {
			_ = c.Close()
		}
		select {
		case p.arrivals <- struct{}{}:
		default:
		}
	}
}

// relay dials PostgreSQL for c and copies both ways until either end closes or cut closes both.
func (p *pgProxy) relay(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, startTimeout)
	if err != nil {
		p.drop(c)
		return
	}
	p.mu.Lock()
	if _, ok := p.conns[c]; !ok { // cut while dialing
		p.mu.Unlock()
		_ = up.Close()
		return
	}
	p.conns[up] = struct{}{}
	p.mu.Unlock()
	var toUp sync.WaitGroup
	toUp.Go(func() {
		_, _ = io.Copy(up, c)
		p.drop(c, up)
	})
	_, _ = io.Copy(c, up)
	p.drop(c, up)
	toUp.Wait()
}

// drop closes conns and forgets them.
func (p *pgProxy) drop(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		delete(p.conns, c)
		_ = c.Close()
	}
}

// cut closes every relayed connection and refuses new ones until restore.
func (p *pgProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = false
	for c := range p.conns {
		_ = c.Close()
	}
	clear(p.conns)
}

// restore relays new connections again.
func (p *pgProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = !p.closed
}

// counts returns the connections relayed and refused so far.
func (p *pgProxy) counts() (relayed, refused int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.relayed, p.refused
}

// close cuts, closes the listener and waits for every goroutine of the proxy.
func (p *pgProxy) close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.cut()
	_ = p.ln.Close()
	p.wg.Wait()
}

// proxiedURL is the PostgreSQL URL u with its host:port replaced by the proxy's.
func proxiedURL(t *testing.T, u string, p *pgProxy) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil || parsed.Host == "" {
		t.Fatalf("%s is not a postgres:// URL with a host", pgtest.Redact(u))
	}
	parsed.Host = p.addr()
	return parsed.String()
}

// pgHostPort is the host:port of the PostgreSQL URL u.
func pgHostPort(t *testing.T, u string) string {
	t.Helper()
	parsed, err := url.Parse(u)
	if err != nil || parsed.Hostname() == "" {
		t.Fatalf("%s is not a postgres:// URL with a host", pgtest.Redact(u))
	}
	if parsed.Port() == "" {
		return net.JoinHostPort(parsed.Hostname(), "5432")
	}
	return parsed.Host
}

// TestPGProxy: the fault tests' proxy does what they rely on, shown on a TCP echo server and then
// on PostgreSQL's own protocol through pgx: it relays; cut breaks an open connection and makes new
// ones fail at once; restore relays again.
func TestPGProxy(t *testing.T) {
	noLeaks(t)
	echo := newEchoServer(t)
	p := newPGProxy(t, echo.Addr().String(), true)

	c := dialProxy(t, p)
	roundTrip(t, c, "before the cut")
	p.cut()
	if err := readFails(c); err != nil {
		t.Fatalf("a connection open at the cut: %v", err)
	}
	refusedBefore := func() int { _, r := p.counts(); return r }()
	if err := readFails(dialProxy(t, p)); err != nil {
		t.Fatalf("a connection made during the cut: %v", err)
	}
	if _, r := p.counts(); r != refusedBefore+1 {
		t.Fatalf("refused %d connections during the cut, want %d", r, refusedBefore+1)
	}
	p.restore()
	roundTrip(t, dialProxy(t, p), "after the restore")

	// PostgreSQL through the proxy (this part needs a server, as the fault tests do).
	base := pgtest.URL(t)
	pp := newPGProxy(t, pgHostPort(t, base), true)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, proxiedURL(t, base, pp))
	if err != nil {
		t.Fatalf("pgx through the proxy: %v", err)
	}
	defer conn.Close(context.Background())
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("SELECT 1 through the proxy: %d, %v", one, err)
	}
	pp.cut()
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err == nil {
		t.Fatal("a query on a connection the proxy cut succeeded")
	}
	if c, err := pgx.Connect(ctx, proxiedURL(t, base, pp)); err == nil {
		c.Close(ctx)
		t.Fatal("pgx connected through a cut proxy")
	}
	pp.restore()
	again, err := pgx.Connect(ctx, proxiedURL(t, base, pp))
	if err != nil {
		t.Fatalf("pgx after the restore: %v", err)
	}
	defer again.Close(context.Background())
	if err := again.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil {
		t.Fatalf("SELECT 1 after the restore: %v", err)
	}
	relayed, refused := pp.counts()
	t.Logf("PostgreSQL through the proxy: %d connections relayed, %d refused during the cut", relayed, refused)
}

// newEchoServer is a TCP server that echoes each connection, stopped (and its goroutines ended)
// when t ends.
func newEchoServer(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { _, _ = io.Copy(c, c) })
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln
}

// dialProxy connects to p, closed when t ends.
func dialProxy(t *testing.T, p *pgProxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.addr(), startTimeout)
	if err != nil {
		t.Fatalf("dialing the proxy: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// roundTrip sends msg through c and fails t unless it comes back.
func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(startTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatalf("%s: write: %v", msg, err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != msg {
		t.Fatalf("%s: read %q, %v", msg, buf, err)
	}
}

// readFails returns nil when a read on c ends with the connection closed (EOF or reset), and an
// error saying otherwise: data, or nothing within the deadline.
func readFails(c net.Conn) error {
	if err := c.SetReadDeadline(time.Now().Add(startTimeout)); err != nil {
		return err
	}
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	switch {
	case n > 0:
		return errors.New("read data: the proxy still relays")
	case errors.As(err, &ne) && ne.Timeout():
		return errors.New("no end within the deadline: the proxy did not close it")
	case err == nil:
		return errors.New("read nothing and no error")
	}
	return nil
}
