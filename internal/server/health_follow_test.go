package server

import (
	"context"
	"errors"
	"sync"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/exchange"
	"github.com/historyd/historyd/internal/store"
)

// TestFollowStorageServices: the services FollowStorage names go NOT_SERVING with the overall and
// HistoryService's statuses while the store's storage is unusable, and SERVING again with them
// (ExchangeService and AdminService stayed SERVING over an unusable database); the store is
// followed, and its change logged, once for all of them; they stay NOT_SERVING after shutdown.
func TestFollowStorageServices(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	srv := New(zap.New(core))
	st := &fakeStorage{Memory: store.NewMemory(), changed: make(chan struct{})}
	ex := exchange.Memory()
	defer ex.Close()
	RegisterExchange(srv, ex)
	RegisterHistory(srv, st)
	RegisterAdmin(srv, nil)
	srv.FollowStorage(st, historyv1.ExchangeService_ServiceDesc.ServiceName, historyv1.AdminService_ServiceDesc.ServiceName)

	names := []string{"", historyv1.HistoryService_ServiceDesc.ServiceName,
		historyv1.ExchangeService_ServiceDesc.ServiceName, historyv1.AdminService_ServiceDesc.ServiceName}
	var streams []*healthStream
	var wg sync.WaitGroup
	for _, name := range names {
		ws := &healthStream{ctx: testContext(t), sent: make(chan healthpb.HealthCheckResponse_ServingStatus, 16)}
		streams = append(streams, ws)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = srv.health.Watch(&healthpb.HealthCheckRequest{Service: name}, ws)
		}()
	}
	expect := func(want healthpb.HealthCheckResponse_ServingStatus) {
		t.Helper()
		for i, ws := range streams {
			select {
			case got := <-ws.sent:
				if got != want {
					t.Fatalf("%q: %v, want %v", names[i], got, want)
				}
			case <-testContext(t).Done():
				t.Fatalf("%q: no status, want %v", names[i], want)
			}
		}
	}
	expect(healthpb.HealthCheckResponse_SERVING)
	st.set(errors.New("database file x is unavailable: disk I/O error"))
	expect(healthpb.HealthCheckResponse_NOT_SERVING)
	st.set(nil)
	expect(healthpb.HealthCheckResponse_SERVING)
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	expect(healthpb.HealthCheckResponse_NOT_SERVING)
	wg.Wait()
	if down, up := logs.FilterMessageSnippet("unusable").Len(), logs.FilterMessageSnippet("usable again").Len(); down != 1 || up != 1 {
		t.Errorf("one flip logged %d unusable and %d usable lines, want 1 and 1: one follower per store", down, up)
	}
}

// TestFollowStorageUnusableFromTheStart: a service that starts following a store already unusable
// answers NOT_SERVING to the very first Check, as HistoryService does (TestHealthNotServingFromTheStart).
func TestFollowStorageUnusableFromTheStart(t *testing.T) {
	srv := New(nil)
	st := &fakeStorage{Memory: store.NewMemory(), changed: make(chan struct{}), unusable: errors.New("PostgreSQL at h:5432/db unreachable; retrying")}
	ex := exchange.Memory()
	defer ex.Close()
	RegisterExchange(srv, ex)
	RegisterHistory(srv, st)
	RegisterAdmin(srv, nil)
	srv.FollowStorage(st, historyv1.ExchangeService_ServiceDesc.ServiceName, historyv1.AdminService_ServiceDesc.ServiceName)
	for _, name := range []string{historyv1.ExchangeService_ServiceDesc.ServiceName, historyv1.AdminService_ServiceDesc.ServiceName} {
		resp, err := srv.Health().Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
			t.Errorf("health of %q right after FollowStorage over an unusable store: %v, %v; want NOT_SERVING", name, resp.GetStatus(), err)
		}
	}
	if err := srv.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}
