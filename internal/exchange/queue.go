package exchange

// compactAfter is how many consumed slots a queue may carry before it considers compacting: small
// enough that a queue popped as fast as it fills stays small, large enough that short queues are
// not copied on every pop.
const compactAfter = 32

// queue is a FIFO over a slice whose consumed prefix is reclaimed: when the queue empties it starts
// over, and once more than half the slice (and more than compactAfter slots) is consumed the live
// part moves to the front. Each item is copied O(1) times on average, so push and popFront are
// amortised O(1). The zero queue is empty and ready; it is not safe for concurrent use.
type queue[T any] struct {
	items []T
	head  int // items[:head] were consumed
}

func (q *queue[T]) len() int { return len(q.items) - q.head }

// live returns the items, oldest first. The slice is the queue's own: do not keep it across a
// change of the queue.
func (q *queue[T]) live() []T { return q.items[q.head:] }

func (q *queue[T]) push(v T) { q.items = append(q.items, v) }

// popFront removes and returns the oldest item.
func (q *queue[T]) popFront() (T, bool) {
	var zero T
	if q.len() == 0 {
		return zero, false
	}
	v := q.items[q.head]
	q.items[q.head] = zero // let what it points to be collected
	q.head++
	q.settle()
	return v, true
}

// settle reclaims the consumed prefix after head moved: it starts over once the queue is empty,
// and moves the live part to the front once more than half the slice is consumed.
func (q *queue[T]) settle() {
	switch {
	case q.head == len(q.items):
		q.items, q.head = q.items[:0], 0
	case q.head > compactAfter && q.head*2 > len(q.items):
		n := copy(q.items, q.items[q.head:])
		clear(q.items[n:])
		q.items, q.head = q.items[:n], 0
	}
}

// removeAt removes and returns the item at index i of live(), keeping the order of the others; it
// panics when i is out of range. It moves whichever side of i is shorter, so removing near either
// end (a lease acknowledged near the head, issue 18) costs O(1) and anywhere else O(min(i, len-i)).
func (q *queue[T]) removeAt(i int) T {
	if i == 0 { // Pop's case: no copy at all
		v, _ := q.popFront()
		return v
	}
	live := q.live()
	v := live[i]
	var zero T
	if i < len(live)/2 {
		copy(live[1:i+1], live[:i])
		live[0] = zero
		q.head++
		q.settle()
	} else {
		copy(live[i:], live[i+1:])
		live[len(live)-1] = zero
		q.items = q.items[:len(q.items)-1]
		if len(q.items) == q.head {
			q.items, q.head = q.items[:0], 0
		}
	}
	return v
}

// drain removes and returns every item, oldest first.
func (q *queue[T]) drain() []T {
	out := make([]T, q.len())
	copy(out, q.live())
	clear(q.items)
	q.items, q.head = q.items[:0], 0
	return out
}
