//go:build historyd_testhook

package server

import (
	"context"
	"runtime"
	"runtime/debug"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/historyd/historyd/internal/store/sqlite"
)

// This file exists only in binaries built with the historyd_testhook build tag (the end-to-end
// tests build one; `make build` and releases never do). It registers historyd.testhook.TestHook,
// whose methods let a test do what no client of a production build can: make a handler panic,
// force a garbage collection before reading the heap from the metrics endpoint, and fail the sqlite
// engine's next commit. Its calls go through
// the production interceptor chain like any other, authentication included.

// TestHookService is the name of the test-hook service.
const TestHookService = "historyd.testhook.TestHook"

var testHookDesc = grpc.ServiceDesc{
	ServiceName: TestHookService,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "Panic", Handler: testHookUnary(func(context.Context) {
			panic("testhook: a handler panic the recovery interceptor must catch")
		})},
		{MethodName: "GC", Handler: testHookUnary(func(context.Context) {
			// Two collections: sync.Pool contents survive the first one in a victim cache.
			runtime.GC()
			runtime.GC()
			debug.FreeOSMemory()
		})},
		// Issue 15: the next commit of the sqlite engine fails as an I/O error on a write would.
		{MethodName: "FailNextCommit", Handler: testHookUnary(func(context.Context) { sqlite.FailNextCommits(1) })},
	},
	Streams: []grpc.StreamDesc{{
		StreamName:    "PanicStream",
		ServerStreams: true,
		Handler: func(_ any, stream grpc.ServerStream) error {
			if err := stream.RecvMsg(new(emptypb.Empty)); err != nil {
				return err
			}
			panic("testhook: a stream handler panic the recovery interceptor must catch")
		},
	}},
}

// testHookUnary returns the handler of a unary test-hook method that runs f.
func testHookUnary(f func(context.Context)) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(emptypb.Empty)
		if err := dec(in); err != nil {
			return nil, err
		}
		handler := func(ctx context.Context, _ any) (any, error) {
			f(ctx)
			return new(emptypb.Empty), nil
		}
		info := &grpc.UnaryServerInfo{FullMethod: "/" + TestHookService + "/" + methodOf(ctx)}
		return interceptor(ctx, in, info, handler)
	}
}

// methodOf returns the method name of the call ctx belongs to.
func methodOf(ctx context.Context) string {
	full, _ := grpc.Method(ctx)
	_, m := splitMethod(full)
	return m
}

// registerTestHooks registers the test-hook service on gs.
func registerTestHooks(gs *grpc.Server) { gs.RegisterService(&testHookDesc, struct{}{}) }
