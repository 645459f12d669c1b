package server

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"
)

// The hold service exists only in tests: its calls stay open until the client or the server ends
// them, so that tests can hold in-flight reservations and open streams while they change the
// server's credentials. Its Unary blocks until its context ends; its Stream sends one message (so
// the client knows the stream is open and registered) and then waits for its context to end.

const (
	holdService      = "historyd.test.Hold"
	holdUnaryMethod  = "/" + holdService + "/Unary"
	holdStreamMethod = "/" + holdService + "/Stream"
	holdClientMethod = "/" + holdService + "/Client"
)

// holdEntered receives one value each time a hold handler starts (after the tap and the chain).
type holdEntered chan struct{}

func holdDesc(entered holdEntered) *grpc.ServiceDesc {
	enter := func() {
		if entered != nil {
			entered <- struct{}{}
		}
	}
	return &grpc.ServiceDesc{
		ServiceName: holdService,
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Unary",
			Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
				in := new(structpb.Value)
				if err := dec(in); err != nil {
					return nil, err
				}
				handler := func(ctx context.Context, _ any) (any, error) {
					enter()
					<-ctx.Done()
					return nil, ctx.Err()
				}
				return interceptor(ctx, in, &grpc.UnaryServerInfo{FullMethod: holdUnaryMethod}, handler)
			},
		}},
		Streams: []grpc.StreamDesc{{
			StreamName:    "Stream",
			ServerStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error {
				if err := stream.RecvMsg(new(structpb.Value)); err != nil {
					return err
				}
				enter()
				if err := stream.SendMsg(structpb.NewStringValue("open")); err != nil {
					return err
				}
				<-stream.Context().Done()
				return stream.Context().Err()
			},
		}, {
			StreamName:    "Client",
			ClientStreams: true,
			Handler: func(_ any, stream grpc.ServerStream) error {
				enter()
				<-stream.Context().Done()
				return stream.Context().Err()
			},
		}},
	}
}

// registerHold returns a register function for newTestServer that adds the hold service.
func registerHold(entered holdEntered) func(*grpc.Server) {
	return func(s *grpc.Server) { s.RegisterService(holdDesc(entered), struct{}{}) }
}

// openHoldStream opens the hold stream on conn and reads its first message: once this returns, the
// stream is open and past the whole chain.
func openHoldStream(t *testing.T, ctx context.Context, conn *grpc.ClientConn) grpc.ClientStream {
	t.Helper()
	desc := holdDesc(nil).Streams[0]
	stream, err := conn.NewStream(ctx, &desc, holdStreamMethod)
	if err != nil {
		t.Fatalf("opening the hold stream: %v", err)
	}
	if err := stream.SendMsg(structpb.NewStringValue("hold")); err != nil {
		t.Fatalf("sending the hold request: %v", err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := stream.RecvMsg(new(structpb.Value)); err != nil {
		t.Fatalf("reading the hold stream's first message: %v", err)
	}
	return stream
}

// eventually waits, up to testTimeout, for cond to hold; what it waits for (a reservation given
// back by a stream context's AfterFunc, a connection's place freed) happens on a goroutine the test
// cannot join, after the client has seen the call end.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", testTimeout, what)
		}
		<-tick.C
	}
}
