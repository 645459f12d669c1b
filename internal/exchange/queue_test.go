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
		checkQueue(t, round, &q, want)
	}
	drained := q.drain()
	if len(drained) != len(want) || q.len() != 0 || len(q.items) != 0 {
		t.Errorf("drain returned %d (want %d), left %d", len(drained), len(want), q.len())
	}
	if _, ok := q.popFront(); ok {
		t.Error("popFront of an empty queue succeeded")
	}
}

// TestQueueRemoveAt (issue 18: Pop takes the oldest visible entry and Ack removes a leased one,
// wherever they are): removing at any index keeps the others' order, zeroes the freed slot on
// either side and keeps the compaction bound, mixed with pushes and pops.
func TestQueueRemoveAt(t *testing.T) {
	var q queue[*int]
	var want []int
	next := 0
	for round := range 300 {
		for range round%5 + 2 {
			v := next
			next++
			q.push(&v)
			want = append(want, v)
		}
		// An index near the head, the middle and the tail in turn.
		i := [...]int{0, 1, len(want) / 2, len(want) - 2, len(want) - 1}[round%5]
		i = max(0, min(i, len(want)-1))
		if p := q.removeAt(i); *p != want[i] {
			t.Fatalf("round %d: removeAt(%d) = %d, want %d", round, i, *p, want[i])
		}
		want = slices.Delete(want, i, i+1)
		if round%3 == 0 {
			if p, ok := q.popFront(); ok {
				if *p != want[0] {
					t.Fatalf("round %d: popFront = %d, want %d", round, *p, want[0])
				}
				want = want[1:]
			}
		}
		checkQueue(t, round, &q, want)
		for j, p := range q.items[len(q.items):cap(q.items)] {
			if p != nil {
				t.Fatalf("round %d: slot %d past the end still holds %d", round, len(q.items)+j, *p)
			}
		}
	}
	for q.len() > 0 {
		q.removeAt(q.len() - 1)
	}
	if q.head != 0 || len(q.items) != 0 {
		t.Errorf("emptied by removeAt: head %d, %d items; want a fresh start", q.head, len(q.items))
	}
}

// checkQueue fails the test unless q holds want in order, its consumed slots are zeroed and it
// compacted once more than compactAfter slots were consumed and they were the majority.
func checkQueue(t *testing.T, round int, q *queue[*int], want []int) {
	t.Helper()
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
