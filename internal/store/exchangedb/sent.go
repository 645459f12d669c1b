package exchangedb

import (
	"sync"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// The sent cache's bounds: at most sentCacheSize messages, each charged three times its encoding
// against sentCacheBytes, none of more than 16 KiB encoded kept. A decoded message takes from
// about its encoding (one long string) to about nine times it (content of many tiny JSON values,
// measured by a review), so the cache holds at most about 12 MiB of heap. A variable for the tests.
var sentCacheSize = 1024

const (
	sentCacheBytes      = 4 << 20
	sentCacheMaxMessage = 16 << 10
)

// sentCache holds, on SQLite, the messages of recent Sends as Send built them, so that the
// Collect that drains them reads only the ledger's outbox rows (a range of one index, which
// names the messages) and not each message's row and body, which it would decode again: on the
// single writer, where a collect runs, that was about 17 µs of a Send+Collect round's 146
// (docs/decisions/0019, "The cost of a Send+Collect round").
//
// A message never changes once sent (its row is written once; the memory engine shares the same
// pointer between the Send's answer and the collect's report, as this does), so an entry is
// never stale: either the ledger still names the message in an outbox, and the entry is that
// message, or nothing will ask for it again (collected through the database, returned by
// Unregister, pruned, or its Send rolled back) and the bounds evict it. A Collect takes the
// entries it uses out; one that finds none reads the message's row, as it always did. What the
// entry lacks is the row's `known` (the direct recipient was registered at the Send), which
// decides only the reason a message whose recipient is not registered at the collect is dropped
// for; that collect reads it (knownAt). SQLite
// only: with PostgreSQL, replicas send and collect in other processes, whose caches would miss.
type sentCache struct {
	mu    sync.Mutex
	m     map[uuid.UUID]sentEntry
	order []uuid.UUID // insertion order from head, for eviction (taken ids stay until passed)
	head  int
	bytes int
}

type sentEntry struct {
	msg  *envelope.Message
	size int
}

func newSentCache() *sentCache {
	return &sentCache{m: make(map[uuid.UUID]sentEntry, sentCacheSize)}
}

// put keeps m, whose encoding is size bytes, evicting the oldest entries past the bounds.
func (c *sentCache) put(m *envelope.Message, size int) {
	if size > sentCacheMaxMessage {
		return
	}
	size *= 3
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[m.ID]; ok { // ids are random: never, but the counts must not drift
		return
	}
	c.m[m.ID] = sentEntry{msg: m, size: size}
	c.bytes += size
	c.order = append(c.order, m.ID)
	// The queue too is bounded: ids taken out stay in it, and the oldest pass out after
	// 2 × sentCacheSize Sends whatever they hold.
	for len(c.m) > sentCacheSize || c.bytes > sentCacheBytes || len(c.order)-c.head > 2*sentCacheSize {
		id := c.order[c.head]
		c.head++
		if e, ok := c.m[id]; ok {
			delete(c.m, id)
			c.bytes -= e.size
		}
	}
	// Taken ids leave the queue only when passed: compact it when they are most of it.
	if c.head >= sentCacheSize {
		c.order = append(c.order[:0], c.order[c.head:]...)
		c.head = 0
	}
}

// take returns and forgets the entry of id.
func (c *sentCache) take(id uuid.UUID) (sentEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if ok {
		delete(c.m, id)
		c.bytes -= e.size
	}
	return e, ok
}
