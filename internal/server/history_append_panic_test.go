package server

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc/codes"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// panicLaneStore is no store.Pipeliner (items run on lanes) and panics in AddMessage on branch bad.
type panicLaneStore struct {
	store.Store
	bad *uuid.UUID
}

func (p panicLaneStore) AddMessage(ctx context.Context, b uuid.UUID, in store.AddInput, o store.WriteOptions) (store.WriteResult, error) {
	if b == *p.bad {
		panic("store fault")
	}
	return p.Store.AddMessage(ctx, b, in, o)
}

// panicQueueStore is a store.Pipeliner whose AddMessageAsync (called on the receiver's goroutine)
// panics on branch bad.
type panicQueueStore struct {
	*store.Memory
	bad *uuid.UUID
}

func (p panicQueueStore) AddMessageAsync(ctx context.Context, b uuid.UUID, in store.AddInput, o store.WriteOptions) func() (store.WriteResult, error) {
	if b == *p.bad {
		panic("queue fault")
	}
	return p.Memory.AddMessageAsync(ctx, b, in, o)
}

// TestAppendItemPanicIsInternal: issue 21 review, finding B: a panic in an item's write, on a
// goroutine the recovery interceptor does not cover, fails that item alone with the fixed INTERNAL
// status the interceptor would give (internalStatus, no panic value sent), and the stream goes on
// (proto: "A failed item fails alone"). Before the fix the panic ended the test process.
func TestAppendItemPanicIsInternal(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   func(bad *uuid.UUID) store.Store
	}{
		{"lane", func(bad *uuid.UUID) store.Store { return panicLaneStore{store.NewMemory(), bad} }},
		{"pipeliner queue", func(bad *uuid.UUID) store.Store { return panicQueueStore{store.NewMemory(), bad} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bad uuid.UUID
			f := newAppendFixture(t, tc.st(&bad))
			b, other := f.create(t, nil), f.create(t, nil)
			bad = uuid.MustParse(other) // set before the stream: the handler reads it after
			out := pipeline(t, f.c, 4, []*historyv1.AddMessageRequest{
				instructionReq(b, "before"), instructionReq(other, "panics"), instructionReq(b, "after"),
			})
			if out[0].GetError() != nil || out[2].GetError() != nil {
				t.Fatalf("items 0 and 2: %v, %v; want written", out[0].GetError(), out[2].GetError())
			}
			_, err := itemAnswer(out[1])
			wantStatusInfo(t, err, codes.Internal, historyv1.ErrorReason_ERROR_REASON_INTERNAL)
			if strings.Contains(err.Error(), "fault") {
				t.Errorf("the item's status %v carries the panic value", err)
			}
		})
	}
}
