package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/historyd/historyd/internal/store"
	"github.com/historyd/historyd/internal/store/storetest"
)

// A subscription's pin and a write to the same branch in one batch: the
// write must not delete events the handle the pin makes says it holds. The
// pin read the oldest retained event before the write ran; had the write
// trimmed the log past it (no handle held it back yet), the handle would
// name a deleted event from the pin's after until the write's, and a
// subscriber joining that handle meanwhile, with a cursor just before it,
// would find the event missing (dbLog.Chunk panics). The batch below runs
// [pin, a job whose after lets the test subscribe, the write].
func TestPinAndTrimInOneBatch(t *testing.T) {
	s := newTestStore(t, storetest.Options{EventRetention: 3})
	ctx := tctx(t)
	x := emptyBranch(t, s)
	for i := range 5 {
		if _, err := s.AddMessage(ctx, x, addInput(fmt.Sprint("m", i)), store.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Head 6 (BRANCH_CREATED and five adds); the log retains 4, 5 and 6.
	release, done := holdWriter(t, s)
	var (
		wg              sync.WaitGroup
		first           *store.Subscription
		firstErr, zErr  error
		addErr          error
		inAfter, resume = make(chan struct{}), make(chan struct{})
	)
	wg.Add(3)
	go func() {
		defer wg.Done()
		three := uint64(3)
		first, firstErr = s.Subscribe(ctx, x, store.SubscribeInput{After: &three})
	}()
	queued(s, 1)
	go func() {
		defer wg.Done()
		zErr = s.w.do(ctx, func(context.Context, *sql.Tx) error { return nil }, func() { close(inAfter); <-resume })
	}()
	queued(s, 2)
	go func() {
		defer wg.Done()
		_, addErr = s.AddMessage(ctx, x, addInput("trims the log"), store.WriteOptions{})
	}()
	queued(s, 3)
	close(release)
	<-done

	// The pin's after has made the handle; the write's has not run yet.
	<-inAfter
	three := uint64(3)
	second, err := func() (sub *store.Subscription, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panicked: %v", p)
			}
		}()
		sub, err = s.Subscribe(ctx, x, store.SubscribeInput{After: &three})
		if err == nil {
			_, err = sub.Next(ctx)
		}
		return sub, err
	}()
	close(resume)
	wg.Wait()
	if second != nil {
		second.Close()
	}
	if first != nil {
		first.Close()
	}
	if zErr != nil || addErr != nil {
		t.Fatalf("the batch's jobs: %v, %v", zErr, addErr)
	}
	if firstErr != nil && !errors.Is(firstErr, store.ErrHistoryCompacted) {
		t.Fatalf("the pinning Subscribe: %v", firstErr)
	}
	if err != nil && !errors.Is(err, store.ErrHistoryCompacted) {
		t.Fatalf("a subscriber joining the new handle before the write's after, from event 4: %v", err)
	}
}
