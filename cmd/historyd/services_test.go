package main

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/server"
	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/exchangedb"
)

// flakyStorage is a store whose storage health the test sets, as the sqlite and postgres engines'
// Health reports it.
type flakyStorage struct {
	*store.Memory
	mu       sync.Mutex
	unusable error
	changed  chan struct{}
}

func (f *flakyStorage) Health() (<-chan struct{}, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed, f.unusable
}

func (f *flakyStorage) set(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.unusable = err
	close(f.changed)
	f.changed = make(chan struct{})
}

// TestServicesFollowTheDatabase: with an engine that keeps the Exchange in its database (sqlite,
// postgres), the ExchangeService's and AdminService's health follow the database's as
// HistoryService's does: NOT_SERVING while it is unusable, SERVING again once it is usable. The
// reviewer saw both stay SERVING while the database was unusable.
func TestServicesFollowTheDatabase(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	st := &flakyStorage{Memory: store.NewMemory(), changed: make(chan struct{})}
	// A database engine as openEngine builds one: the Exchange in the store's database (a driver
	// no call reaches here: the Exchange served is ex).
	e := &engine{Store: st, name: storeSQLite, exchange: struct{ exchangedb.Driver }{}, close: func() error { return nil }}
	ex := exchange.Memory()
	defer ex.Close()
	cfg, err := parseConfig(nil, envOf(nil))
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(nil)
	registerServices(srv, e, ex, cfg)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	defer func() {
		_ = srv.Shutdown(context.Background())
		<-served
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	names := []string{historyv1.HistoryService_ServiceDesc.ServiceName, historyv1.ExchangeService_ServiceDesc.ServiceName,
		historyv1.AdminService_ServiceDesc.ServiceName}
	var watches []healthpb.Health_WatchClient
	for _, name := range names {
		w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: name})
		if err != nil {
			t.Fatal(err)
		}
		watches = append(watches, w)
	}
	expect := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for i, w := range watches {
			resp, err := w.Recv()
			if err != nil || resp.GetStatus() != want {
				t.Fatalf("health of %s: %v, %v; want %v", names[i], resp.GetStatus(), err, want)
			}
		}
	}
	expect(healthpb.HealthCheckResponse_SERVING)
	st.set(errors.New("database file x is unavailable: disk I/O error"))
	expect(healthpb.HealthCheckResponse_NOT_SERVING)
	st.set(nil)
	expect(healthpb.HealthCheckResponse_SERVING)
}
