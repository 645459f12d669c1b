package main

import (
	"context"
	"net"
	"testing"

	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/server"
	"github.com/historyd/historyd/internal/store"
)

// The example runs to the end against a server wired as cmd/historyd wires it, so the README's
// link points at code that works.
func TestRun(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(nil)
	ex := exchange.Memory()
	defer ex.Close()
	server.RegisterExchange(srv, ex)
	server.RegisterHistory(srv, store.NewMemory())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		_ = srv.Shutdown(context.Background())
		<-served
	}()
	if err := run(t.Context(), lis.Addr().String()); err != nil {
		t.Fatal(err)
	}
}
