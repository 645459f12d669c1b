package client_test

import (
	"context"
	"net"
	"testing"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/server"
	"github.com/historyd/historyd/internal/store"
)

// startServer serves historyd on a real TCP port of 127.0.0.1, wired as cmd/historyd wires it:
// server.New with the production interceptor chain, HistoryService over the memory store and
// ExchangeService. It runs in the test process so that -race sees both ends and a test can shrink
// the store's buffers (storeOpts) to force the slow paths. It returns the address; Cleanup shuts
// it down.
func startServer(t testing.TB, storeOpts ...store.Option) string {
	t.Helper()
	return startServerWith(t, nil, storeOpts...)
}

// startServerWith is startServer with server options too (auth tokens, limits).
func startServerWith(t testing.TB, serverOpts []server.Option, storeOpts ...store.Option) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(nil, serverOpts...)
	ex := exchange.Memory()
	server.RegisterExchange(srv, ex)
	server.RegisterHistory(srv, store.NewMemory(storeOpts...))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
		ex.Close()
	})
	return lis.Addr().String()
}
