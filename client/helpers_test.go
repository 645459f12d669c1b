package client_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/historyd/historyd/client"
	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// testTimeout bounds every call of these tests; generous, for the race detector on 2 cores.
const testTimeout = 30 * time.Second

// fastRetry retries quickly, so that the tests wait little for backoff.
var fastRetry = client.RetryPolicy{MaxAttempts: 4, InitialBackoff: 5 * time.Millisecond, MaxBackoff: 20 * time.Millisecond, Multiplier: 2, Jitter: 0.2}

// dial returns a plaintext Client for addr, closed at the end of the test.
func dial(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.Dial(addr, append([]client.Option{client.WithInsecure()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// serveFake serves on a loopback port the fake services register adds, until the end of the test,
// and returns a Client of it: for behaviour no real server shows.
func serveFake(t *testing.T, register func(*grpc.Server)) *client.Client {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	register(gs)
	served := make(chan error, 1)
	go func() { served <- gs.Serve(lis) }()
	t.Cleanup(func() {
		gs.Stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return dial(t, lis.Addr().String())
}

// testContext is a context bounded by testTimeout, canceled at the end of the test.
func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// attempt is one attempt of a unary call, as the retry interceptor made it.
type attempt struct {
	method    string
	requestID string // the request's request_id, "" when it has none
	code      codes.Code
}

// recorder records every attempt: its interceptor runs inside the client's retry interceptor
// (WithDialOptions adds it after), so once per attempt. after, when set, runs after each attempt
// with its number (1-based) and error.
type recorder struct {
	mu       sync.Mutex
	attempts []attempt
	after    func(n int, err error)
}

func (r *recorder) option() client.Option {
	return client.WithDialOptions(grpc.WithChainUnaryInterceptor(r.intercept))
}

func (r *recorder) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	a := attempt{method: method, requestID: requestID(req), code: status.Code(err)}
	r.mu.Lock()
	r.attempts = append(r.attempts, a)
	n, after := len(r.attempts), r.after
	r.mu.Unlock()
	if after != nil {
		after(n, err)
	}
	return err
}

// reset forgets the attempts so far and sets after.
func (r *recorder) reset(after func(n int, err error)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.attempts, r.after = nil, after
}

// Attempts returns the attempts so far.
func (r *recorder) Attempts() []attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]attempt(nil), r.attempts...)
}

// requestID reads the request_id field of a request, "" when it has none.
func requestID(req any) string {
	m, ok := req.(proto.Message)
	if !ok {
		return ""
	}
	fd := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name("request_id"))
	if fd == nil {
		return ""
	}
	return m.ProtoReflect().Get(fd).String()
}

// newBranch creates an empty branch through c and returns its id.
func newBranch(t *testing.T, c *client.Client) string {
	t.Helper()
	resp, err := c.History.CreateBranch(testContext(t), &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetBranch().GetId()
}

// head returns the branch's head sequence, read through c.
func head(t *testing.T, c *client.Client, branch string) uint64 {
	t.Helper()
	resp, err := c.History.GetBranch(testContext(t), &historyv1.GetBranchRequest{BranchId: branch})
	if err != nil {
		t.Fatal(err)
	}
	return resp.GetBranch().GetHeadSequence()
}

// instruction is an AddMessage input of a plain instruction.
func instruction(text string) *historyv1.AddMessageRequest_Instruction {
	return &historyv1.AddMessageRequest_Instruction{Instruction: &historyv1.InstructionInput{
		InstructionValue: &historyv1.InstructionInput_Instruction{Instruction: text},
	}}
}
