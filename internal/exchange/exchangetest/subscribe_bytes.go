package exchangetest

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/historyd/historyd/internal/envelope"
	"github.com/historyd/historyd/internal/exchange"
)

// testSubscribeEvictsSlowBytes: a subscription's buffer is bounded in bytes as well as in messages
// (the hostile review: 256 messages of 4 MiB each, about 1 GiB, for a SubscribeInbox stream that
// never reads). One that buffers past its bytes is evicted with ErrSubscriberTooSlow far below the
// count; what it was given is a prefix of the inbox, in order, and it resumes as the Exchange
// documents, with Receive, which holds every message once. A message larger than the bound on its
// own still reaches a reader that keeps up, live.
func testSubscribeEvictsSlowBytes(t *testing.T, f Factory, _ Capabilities) {
	const size, sends = 16 << 10, 10 // 10 messages of about 16 KiB; room for 3 in 48 KiB
	x := newFx(t, f, Options{SubscriberBufferBytes: 48 << 10}, ownerA, ownerB)
	s, _ := x.subscribe(ownerB, nil)
	var sent []*envelope.Message
	for i := range sends {
		sent = append(sent, x.send(ownerA, to(ownerB), strconv.Itoa(i)+strings.Repeat("x", size)))
	}
	x.collect(ownerA) // returns although nobody reads s
	if err := ended(t, s); !errors.Is(err, exchange.ErrSubscriberTooSlow) {
		t.Fatalf("Err = %v, want ErrSubscriberTooSlow", err)
	}
	var got []*envelope.Message
	for range len(s.Events()) {
		got = append(got, <-s.Events())
	}
	if len(got) < 1 || len(got) >= sends || !sameAll(got, sent[:len(got)]) {
		t.Errorf("evicted subscription held %d messages %q, want 1 to %d, the first sent", len(got), short(got), sends-1)
	}
	if inbox := x.receive(ownerB, nil); !sameAll(inbox, sent) {
		t.Errorf("Receive after the eviction = %q, want each message sent once, in order", short(inbox))
	}

	// A reader that keeps up gets messages larger than its bound live, one at a time.
	y := newFx(t, f, Options{SubscriberBufferBytes: 1}, ownerA, ownerB)
	live, _ := y.subscribe(ownerB, nil)
	for i := range 3 {
		m := y.send(ownerA, to(ownerB), strconv.Itoa(i)+strings.Repeat("y", size))
		y.collect(ownerA)
		if got := next(t, live); !same(got, m) {
			t.Fatalf("live message %q, want %q", content(got)[:4], content(m)[:4])
		}
	}
	if err := live.Err(); err != nil {
		t.Errorf("a reader that keeps up was evicted: %v", err)
	}
}

// short names messages by their contents' first bytes.
func short(msgs []*envelope.Message) []string {
	out := contents(msgs)
	for i, c := range out {
		out[i] = c[:min(len(c), 4)]
	}
	return out
}
