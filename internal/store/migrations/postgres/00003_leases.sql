-- historyd schema, version 3 (postgres): leases, acks and redelivery (issue 18,
-- internal/exchange/lease.go has the rules). Additive: columns with constant
-- defaults and two partial indexes, so rows written by version 2 read as
-- "never leased" and an owner registered before it as "the server's
-- defaults". The twin is ../sqlite/00003_leases.sql.
--
-- dialect: SQLite's ALTER TABLE adds one column per statement; PostgreSQL
-- could add several in one, but the files keep one statement per column so
-- they read alike. Neither rewrites the table for a column with a constant
-- default (PostgreSQL 11 and later store the default in the catalogue), so
-- the migration costs the index builds alone: reads of exchange_ledger,
-- with no row to index yet (every visible_at and held is 0). Down: SQLite
-- (3.35+) drops a column only when no index names it, so the indexes go
-- first in both.

-- +goose Up
-- An owner's lease settings (exchange.OwnerSettings), stored resolved at
-- Register, so a restart with other --exchange-* flags keeps them; 0 (an
-- owner registered before version 3) means the server's defaults.
ALTER TABLE exchange_owners ADD COLUMN max_attempts BIGINT NOT NULL DEFAULT 0;
ALTER TABLE exchange_owners ADD COLUMN visibility_ns BIGINT NOT NULL DEFAULT 0;

-- A delivery's leases (inbox rows): attempts counts the leases it had (kept
-- when the row moves on, for the ledger and a max-attempts dead letter);
-- visible_at is the Unix nanoseconds, on the clock of the replica that set
-- it, when a leased or nacked row is visible again (0: never leased, and
-- every row that left the inbox); held is 0 when no lease holds the row, 1
-- while one does, 2 while one does on the message's last attempt (its
-- attempts reached the owner's max_attempts: the lease's end makes it a
-- dead letter).
ALTER TABLE exchange_ledger ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0;
ALTER TABLE exchange_ledger ADD COLUMN visible_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE exchange_ledger ADD COLUMN held BIGINT NOT NULL DEFAULT 0;

-- Two partial indexes, each read by one range, so that neither database
-- needs statistics to plan them. exchange_ledger_by_visible holds the rows
-- a lease touched that are still in an inbox (never-leased rows are not in
-- it, so Send, Collect and Pop of unleased mail write it no entry): a
-- Lease's held count and next deadline read the hidden ones only
-- (visible_at > now). exchange_ledger_by_last holds the leases on a
-- message's last attempt alone: the max-attempts sweep's probe (visible_at
-- <= now) reads nothing for an owner with none, and only those for one that
-- has some. One index on (tenant, holder, held, visible_at) served both
-- with held IN (0, 1, 2), which SQLite planned as a scan of the tenant's
-- primary key.
CREATE INDEX exchange_ledger_by_visible ON exchange_ledger (tenant, holder, visible_at) WHERE visible_at > 0;
CREATE INDEX exchange_ledger_by_last ON exchange_ledger (tenant, holder, visible_at) WHERE held = 2;

-- +goose Down
DROP INDEX exchange_ledger_by_last;
DROP INDEX exchange_ledger_by_visible;
ALTER TABLE exchange_ledger DROP COLUMN held;
ALTER TABLE exchange_ledger DROP COLUMN visible_at;
ALTER TABLE exchange_ledger DROP COLUMN attempts;
ALTER TABLE exchange_owners DROP COLUMN visibility_ns;
ALTER TABLE exchange_owners DROP COLUMN max_attempts;
