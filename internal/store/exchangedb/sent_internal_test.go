package exchangedb

import (
	"testing"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// TestSentCacheBounded: the sent cache holds at most sentCacheSize messages and sentCacheBytes of
// their charges (three times their encoding), keeps no message of more than sentCacheMaxMessage,
// and its queue stays bounded when every message is taken out (the common case: each Send
// collected) as when none is.
func TestSentCacheBounded(t *testing.T) {
	c := newSentCache()
	msg := func() *envelope.Message { return &envelope.Message{Element: envelope.Element{ID: uuid.New()}} }
	for i := range 10 * sentCacheSize {
		m := msg()
		c.put(m, 100)
		if i%2 == 0 {
			if _, ok := c.take(m.ID); !ok {
				t.Fatalf("put %d: not there", i)
			}
		}
		if len(c.m) > sentCacheSize || len(c.order)-c.head > 2*sentCacheSize || cap(c.order) > 4*sentCacheSize {
			t.Fatalf("put %d: %d held, queue %d from %d (cap %d)", i, len(c.m), len(c.order), c.head, cap(c.order))
		}
	}
	if c.bytes != 300*len(c.m) {
		t.Fatalf("bytes %d for %d messages of 100 (charged 300)", c.bytes, len(c.m))
	}
	big := msg()
	c.put(big, sentCacheMaxMessage+1)
	if _, ok := c.take(big.ID); ok {
		t.Fatal("a message over the size limit was kept")
	}
	for range 100 {
		c.put(msg(), sentCacheMaxMessage)
		if c.bytes > sentCacheBytes {
			t.Fatalf("%d bytes held, at most %d", c.bytes, sentCacheBytes)
		}
	}
}
