package exchangedb

import (
	"sync"

	"github.com/google/uuid"

	"github.com/historyd/historyd/internal/envelope"
)

// sentCacheSize bounds the messages the sent cache holds: about 1,024 × 2.5 KB for 1 KB
// messages (the envelope as decoded), a few MiB. A variable for the tests.
var sentCacheSize = 1024

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
// Unregister, pruned, or its Send rolled back) and the bound evicts it. A Collect takes the
// entries it uses out; one that finds none reads the message's row, as it always did. SQLite
// only: with PostgreSQL, replicas send and collect in other processes, whose caches would miss.
type sentCache struct {
	mu   sync.Mutex
	m    map[uuid.UUID]sentEntry
	ring []uuid.UUID // insertion order, for eviction
	next int
}

type sentEntry struct {
	msg *envelope.Message
	// known: the direct recipient was a registered owner at the Send (exchange_messages.known).
	known bool
}

func newSentCache() *sentCache {
	return &sentCache{m: make(map[uuid.UUID]sentEntry, sentCacheSize), ring: make([]uuid.UUID, sentCacheSize)}
}

// put keeps m, evicting the oldest entry when full (it may be gone already: taken).
func (c *sentCache) put(m *envelope.Message, known bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.ring[c.next]
	if _, ok := c.m[old]; ok && old != m.ID {
		delete(c.m, old)
	}
	c.ring[c.next] = m.ID
	c.next = (c.next + 1) % len(c.ring)
	c.m[m.ID] = sentEntry{msg: m, known: known}
}

// take returns and forgets the entry of id.
func (c *sentCache) take(id uuid.UUID) (sentEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[id]
	if ok {
		delete(c.m, id)
	}
	return e, ok
}
