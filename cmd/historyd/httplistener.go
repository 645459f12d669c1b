package main

import (
	"context"
	"errors"
	"net"
	"net/http"
)

// httpListener is an HTTP server on a listener of its own (--metrics-addr, --pprof-addr) and the
// goroutine that serves it.
type httpListener struct {
	http   *http.Server
	lis    net.Listener
	served chan error
}

// listenHTTP listens on addr and serves srv there until close or stop. The serving goroutine is
// owned by the returned listener: close and stop end it and wait.
func listenHTTP(addr string, srv *http.Server) (*httpListener, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	hl := &httpListener{http: srv, lis: lis, served: make(chan error, 1)}
	go func() { hl.served <- srv.Serve(lis) }()
	return hl, nil
}

// addr is the address the listener serves on.
func (hl *httpListener) addr() string { return hl.lis.Addr().String() }

// close closes the listener and its connections at once (a request in progress is cut) and waits
// for the serving goroutine.
func (hl *httpListener) close() error { return hl.wait(hl.http.Close()) }

// stop closes the listener, lets the requests in progress finish until ctx ends, then closes
// their connections, and waits for the serving goroutine.
func (hl *httpListener) stop(ctx context.Context) error {
	err := hl.http.Shutdown(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		err = hl.http.Close()
	}
	return hl.wait(err)
}

// wait waits for the serving goroutine: its error when Serve failed, else err, the error of
// closing.
func (hl *httpListener) wait(err error) error {
	if serr := <-hl.served; !errors.Is(serr, http.ErrServerClosed) {
		return serr
	}
	return err
}
