package exchange

import (
	"slices"
	"testing"
)

// TestQueue (review finding MINOR 6: the outbox and inboxes, the dead letters and the request logs
// share one queue): FIFO order across compactions, consumed slots zeroed so that what they pointed
// to can be collected, and the slice's length bounded by twice the live items past compactAfter.
func TestQueue(t *testing.T) {
	var q queue[*int]
	var want []int
	next := 0
	for round := range 200 {
		for range round%7 + 1 {
			v := next
			next++
			q.push(&v)
			want = append(want, v)
		}
		for range round % 5 {
			p, ok := q.popFront()
			if !ok || *p != want[0] {
				t.Fatalf("round %d: popFront = %v, %v; want %d", round, p, ok, want[0])
			}
			want = want[1:]
		}
		var got []int
		for _, p := range q.live() {
			got = append(got, *p)
		}
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: live %v, want %v", round, got, want)
		}
		for i, p := range q.items[:q.head] {
			if p != nil {
				t.Fatalf("round %d: consumed slot %d still holds %d", round, i, *p)
			}
		}
		if q.head > compactAfter && q.head*2 > len(q.items) {
			t.Fatalf("round %d: %d consumed of %d not compacted", round, q.head, len(q.items))
		}
	}
	drained := q.drain()
	if len(drained) != len(want) || q.len() != 0 || len(q.items) != 0 {
		t.Errorf("drain returned %d (want %d), left %d", len(drained), len(want), q.len())
	}
	if _, ok := q.popFront(); ok {
		t.Error("popFront of an empty queue succeeded")
	}
}
