package client

import (
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
)

// neverRetried are the unary methods that change state and have no request_id: a retry after a
// lost response could apply them twice (retry.go, readOnly).
var neverRetried = map[string]bool{
	"/historyd.v1.ExchangeService/Register":   true,
	"/historyd.v1.ExchangeService/Unregister": true,
	"/historyd.v1.ExchangeService/Collect":    true,
	"/historyd.v1.ExchangeService/CollectAll": true,
	"/historyd.v1.ExchangeService/PopMessage": true,
	"/historyd.v1.ExchangeService/Lease":      true,
}

// Every unary method of both services is classified: read-only, a mutation with a request_id, a
// lease settlement whose repeat changes nothing (issue 18), or never retried. A new RPC fails this
// test until someone decides which it is.
func TestEveryMethodIsClassified(t *testing.T) {
	for _, sd := range []grpc.ServiceDesc{historyv1.HistoryService_ServiceDesc, historyv1.ExchangeService_ServiceDesc} {
		desc, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(sd.ServiceName))
		if err != nil {
			t.Fatal(err)
		}
		methods := desc.(protoreflect.ServiceDescriptor).Methods()
		for i := range methods.Len() {
			m := methods.Get(i)
			if m.IsStreamingServer() || m.IsStreamingClient() {
				continue // streams are not retried by the interceptor (Watch resumes by itself)
			}
			full := "/" + sd.ServiceName + "/" + string(m.Name())
			hasID := m.Input().Fields().ByName(requestIDField) != nil
			classes := 0
			for _, in := range []bool{readOnly[full], hasID, settlements[full], neverRetried[full]} {
				if in {
					classes++
				}
			}
			if classes != 1 {
				t.Errorf("%s: read-only %v, request_id %v, settlement %v, never retried %v: want exactly one", full, readOnly[full], hasID, settlements[full], neverRetried[full])
			}
			req, ok := retryable(full, mustNew(t, m.Input()))
			if ok == neverRetried[full] {
				t.Errorf("%s: retryable = %v", full, ok)
			}
			if hasID && requestID(req) == "" {
				t.Errorf("%s: a retried mutation got no request_id", full)
			}
		}
	}
	if _, ok := retryable("/grpc.health.v1.Health/Check", &healthpb.HealthCheckRequest{}); !ok {
		t.Error("Health/Check is not retried")
	}
	if len(readOnly) != 11 || len(settlements) != 3 {
		t.Errorf("readOnly has %d methods, settlements %d; update this test with the new ones", len(readOnly), len(settlements))
	}
}

func mustNew(t *testing.T, md protoreflect.MessageDescriptor) any {
	t.Helper()
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName())
	if err != nil {
		t.Fatal(err)
	}
	return mt.New().Interface()
}

func requestID(req any) string {
	m := req.(interface{ ProtoReflect() protoreflect.Message }).ProtoReflect()
	return m.Get(m.Descriptor().Fields().ByName(requestIDField)).String()
}

// The pause grows by Multiplier, stays within MaxBackoff, and varies by at most ±Jitter (issue 8:
// "bounded, jittered backoff").
func TestBackoffBoundedAndJittered(t *testing.T) {
	p := RetryPolicy{InitialBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, Multiplier: 2, Jitter: 0.2}
	want := []time.Duration{10, 20, 40, 80, 100, 100, 100}
	for i, w := range want {
		w *= time.Millisecond
		lo, hi := time.Duration(float64(w)*0.8), time.Duration(float64(w)*1.2)
		seen := map[time.Duration]bool{}
		for range 50 {
			d := p.backoff(i + 1)
			if d < lo || d > hi {
				t.Fatalf("backoff(%d) = %v, want within [%v, %v]", i+1, d, lo, hi)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Errorf("backoff(%d) took one value in 50 draws: no jitter", i+1)
		}
	}
	if d := (RetryPolicy{InitialBackoff: time.Millisecond}).backoff(3); d != time.Millisecond {
		t.Errorf("without multiplier or jitter, backoff = %v, want the initial 1ms", d)
	}
}
