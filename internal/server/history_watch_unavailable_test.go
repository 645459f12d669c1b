package server

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	historyv1 "github.com/historyd/historyd/gen/historyd/v1"
	"github.com/historyd/historyd/internal/store"
)

// endableStore is a Memory whose subscriptions come from a feed the test
// ends, as the PostgreSQL engine ends its subscribers when its wake-ups
// from other replicas are cut.
type endableStore struct {
	*store.Memory
	mu   sync.RWMutex
	feed *store.Feed
	log  *fixedLog
}

func (e *endableStore) Subscribe(_ context.Context, id uuid.UUID, in store.SubscribeInput) (*store.Subscription, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.feed.Subscribe(id, uuid.New(), in, store.SubscriptionLimits{Buffer: 16, Open: new(atomic.Int64)})
}

// fixedLog is a log whose head is its one commit, which it never replays
// (the test subscribes from now).
type fixedLog struct{ head uint64 }

func (l *fixedLog) Oldest() uint64 { return 1 }
func (l *fixedLog) Last() uint64   { return l.head }
func (l *fixedLog) Chunk(after uint64, _ int, _ func(store.Commit) store.Commit) ([]store.Commit, uint64) {
	return nil, after
}
func (l *fixedLog) Frozen() store.Log { return l }

// Issue 16: "the connection lost mid-run: ... open streams end UNAVAILABLE
// and the client package resumes them": a subscription ended with
// store.ErrStorageUnavailable (Feed.EndAll) ends its WatchBranch stream
// with UNAVAILABLE, reason STORAGE_UNAVAILABLE, and the stream's cursor.
func TestWatchBranchEndsUnavailable(t *testing.T) {
	mem := store.NewMemory()
	es := &endableStore{Memory: mem, log: &fixedLog{head: 1}}
	es.feed = store.NewFeed(&es.mu, es.log)
	hs := NewHistoryServer(es, nil)
	hs.encodeFrames = true
	ts := newTestServer(t, func(gs *grpc.Server) { historyv1.RegisterHistoryServiceServer(gs, hs) })
	ts.OnShutdown(hs.EndStreams)
	c := historyv1.NewHistoryServiceClient(ts.conn)
	ctx := testContext(t)
	created, err := c.CreateBranch(ctx, &historyv1.CreateBranchRequest{})
	if err != nil {
		t.Fatal(err)
	}
	b := created.GetBranch().GetId()
	s, rec := openWatch(ctx, t, c, &historyv1.WatchBranchRequest{BranchId: b})
	es.mu.Lock()
	es.feed.EndAll(fmt.Errorf("PostgreSQL at db:5432/h: the LISTEN connection was lost: %w", store.ErrStorageUnavailable))
	es.mu.Unlock()
	recvUntil(s, rec, nil)
	checkStatus(t, rec.end, codes.Unavailable, historyv1.ErrorReason_ERROR_REASON_STORAGE_UNAVAILABLE,
		map[string]string{"branchId": b, "lastSequence": strconv.FormatUint(es.log.head, 10)})
}
