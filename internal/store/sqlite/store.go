package sqlite

import (
	"context"
	"time"

	"github.com/historyd/historyd/internal/store"
)

// StoreConfig configures a Store: where its database is and the store's
// bounds, which mean what they mean for store.Memory.
type StoreConfig struct {
	Config
	// EventRetention is how many events each branch's log keeps (0:
	// store.DefaultEventRetention).
	EventRetention int
	// RequestTTL and RequestMax are the idempotency window (0: the
	// store.DefaultRequest* values).
	RequestTTL time.Duration
	RequestMax int
	// SubscriberBuffer is the default subscription buffer in commits, and
	// MaxSubscriptions the limit of open subscriptions (0: store defaults).
	SubscriberBuffer int
	MaxSubscriptions int
	// Clock is the idempotency window's clock (nil: time.Now).
	Clock func() time.Time
}

// Store is the durable store.Store over one SQLite database.
type Store struct {
	db *DB
}

// var _ store.Store = (*Store)(nil) -- restored once the engine lands

// OpenStore opens (creating and migrating it as Config says) the database
// in cfg.Dir and returns the store over it. It fails with a *LockError when
// another process holds the directory, and with a
// *migrations.VersionError when the schema is newer than this server.
func OpenStore(ctx context.Context, cfg StoreConfig) (*Store, error) {
	panic("sqlite: OpenStore is being written (issue 14)")
}

// Path returns the database file's path.
func (s *Store) Path() string { return s.db.Path }

// Close stops the writer and closes the database; it is safe to call more
// than once.
func (s *Store) Close() error { return s.db.Close() }

// Stats returns what the metrics read.
func (s *Store) Stats() store.Stats { panic("sqlite: Stats is being written (issue 14)") }
