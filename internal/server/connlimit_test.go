package server

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestLimitListener: issue 11 "a connection cap (--max-connections)": past the cap a connection is
// closed as soon as it is accepted (the client reads EOF at once, it is not queued); closing an open
// one frees its place, once however often it is closed.
func TestLimitListener(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	lis := limitConnections(raw, 2, m).(*limitListener)
	defer lis.Close()
	accepted := make(chan net.Conn)
	acceptDone := make(chan struct{})
	go func() { // owned by the test: ends when lis is closed
		defer close(acceptDone)
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	defer func() { lis.Close(); <-acceptDone }()

	dial := func() net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	var server []net.Conn
	for range 2 {
		dial()
		server = append(server, <-accepted)
	}
	// The third is closed by the server: the client reads EOF (or a reset), with no timeout.
	third := dial()
	_ = third.SetReadDeadline(time.Now().Add(testTimeout))
	if _, err := third.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("read on a connection past the cap: %v, want EOF or a reset", err)
	}
	if v, _ := metricValue(t, m, "historyd_connections_refused_total", nil); v != 1 {
		t.Errorf("connections refused = %v, want 1", v)
	}
	if v, _ := metricValue(t, m, "historyd_connections_open", nil); v != 2 {
		t.Errorf("connections open = %v, want 2", v)
	}
	server[0].Close()
	server[0].Close() // a second Close frees nothing more
	if n := lis.open.Load(); n != 1 {
		t.Fatalf("open after closing one twice = %d, want 1", n)
	}
	dial()
	server = append(server, <-accepted)
	if n := lis.open.Load(); n != 2 {
		t.Errorf("open = %d, want 2", n)
	}
	for _, c := range server {
		c.Close()
	}
	if n := lis.open.Load(); n != 0 {
		t.Errorf("open after closing all = %d, want 0", n)
	}
}

// isReset reports whether err is a connection reset (what a client may read instead of EOF when the
// server closes a connection whose data it has not read).
func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout()
}
