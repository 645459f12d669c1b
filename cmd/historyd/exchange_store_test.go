package main

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// serveUntil runs historyd with args until the returned stop function is called, and returns the
// address it serves on.
func serveUntil(t *testing.T, args ...string) (addr string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sink := newLogSink()
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"--listen", "127.0.0.1:0", "--grace-period", "5s"}, args...), envOf(nil), sink)
	}()
	select {
	case addr = <-sink.serving:
	case code := <-done:
		cancel()
		t.Fatalf("run exited %d before serving: %q", code, sink.lines())
	case <-time.After(testTimeout):
		cancel()
		t.Fatalf("no serving line within %v: %q", testTimeout, sink.lines())
	}
	return addr, func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("run = %d, want 0; log %q", code, sink.lines())
			}
		case <-time.After(testTimeout):
			t.Fatal("run did not return after its context ended")
		}
	}
}

// Issue 17: "--store sqlite keeps the Exchange in the database": an owner registered and a message
// sent before a restart are there after it, and the message is delivered by a Collect after it
// (docs/examples/exchange.sh across a restart is engineer C's and D's e2e; this is the wiring).
func TestExchangeSurvivesRestartOnSQLite(t *testing.T) {
	dir := t.TempDir()
	const a, b = "aaaaaaaa-aaaa-4aaa-8aaa-aaaaaaaaaaaa", "bbbbbbbb-bbbb-4bbb-8bbb-bbbbbbbbbbbb"
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	client := func(addr string) (historyv1.ExchangeServiceClient, func()) {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		return historyv1.NewExchangeServiceClient(conn), func() { conn.Close() }
	}

	addr, stop := serveUntil(t, "--store", "sqlite", "--data-dir", dir)
	ex, closeConn := client(addr)
	for _, o := range []string{a, b} {
		if _, err := ex.Register(ctx, &historyv1.RegisterRequest{OwnerId: o}); err != nil {
			t.Fatal(err)
		}
	}
	sent, err := ex.Send(ctx, &historyv1.SendRequest{Sender: a, Recipient: structpb.NewStringValue(b), ContentJson: proto.String(`"kept"`)})
	if err != nil {
		t.Fatal(err)
	}
	closeConn()
	stop()

	addr, stop = serveUntil(t, "--store", "sqlite", "--data-dir", dir)
	defer stop()
	ex, closeConn = client(addr)
	defer closeConn()
	owners, err := ex.ListOwners(ctx, &historyv1.ListOwnersRequest{})
	if err != nil || len(owners.GetOwners()) != 2 {
		t.Fatalf("ListOwners after the restart = %v, %v; want the 2 owners registered before it", owners, err)
	}
	col, err := ex.Collect(ctx, &historyv1.CollectRequest{OwnerId: a})
	if err != nil || col.GetDeliveredCount() != 1 {
		t.Fatalf("Collect after the restart = %v, %v; want the message sent before it delivered", col, err)
	}
	got, err := ex.Receive(ctx, &historyv1.ReceiveRequest{OwnerId: b})
	if err != nil || len(got.GetMessages()) != 1 || got.GetMessages()[0].GetId() != sent.GetMessage().GetId() {
		t.Fatalf("Receive = %v, %v; want message %s", got, err, sent.GetMessage().GetId())
	}
}
