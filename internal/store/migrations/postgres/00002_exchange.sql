-- historyd schema, version 2 (postgres): the Exchange in the database (issue 17,
-- docs/decisions/0019-exchange-in-the-database.md). Additive: new tables only.
--
-- dialect: unlike the history tables, ids are TEXT here in both dialects
-- (canonical lowercase UUIDs) and integers BIGINT (SQLite reads it as
-- INTEGER), so internal/store/exchangedb runs one SQL text on both. The small
-- tables are WITHOUT ROWID in SQLite (the primary key is the table: one b-tree
-- less to write per row); PostgreSQL has no such clause. Partial indexes
-- (WHERE ...) are in both.

-- +goose Up
-- Per-tenant counters: 'reg' numbers registrations (the Owners cursor),
-- 'dead_lettered' counts the dead letters ever made (Stats).
CREATE TABLE exchange_counters (
    tenant TEXT   NOT NULL DEFAULT '',
    name   TEXT   NOT NULL,
    value  BIGINT NOT NULL,
    PRIMARY KEY (tenant, name)
);

-- One row per registered owner; Unregister deletes it. Its counters are
-- the flow's: next_seq numbers what lands in the flow (outbox and inbox
-- entries: Receive's order and the Cursor's Seq), next_ord numbers its
-- inboxes in creation order (the Cursor's Inbox; 0 is the outbox),
-- next_dead its dead letters; evicted counts those the bound dropped;
-- queued, inbox and dead are what it holds now (O(1) bounds and stats).
CREATE TABLE exchange_owners (
    tenant   TEXT   NOT NULL DEFAULT '',
    owner    TEXT   NOT NULL,
    reg_seq  BIGINT NOT NULL,
    next_seq BIGINT NOT NULL DEFAULT 0,
    next_ord BIGINT NOT NULL DEFAULT 0,
    next_dead BIGINT NOT NULL DEFAULT 0,
    evicted  BIGINT NOT NULL DEFAULT 0,
    queued   BIGINT NOT NULL DEFAULT 0,
    inbox    BIGINT NOT NULL DEFAULT 0,
    dead     BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, owner)
);
CREATE UNIQUE INDEX exchange_owners_by_reg ON exchange_owners (tenant, reg_seq);

-- The envelope JSON once per message, shared by every delivery of a
-- broadcast; known is set when the direct recipient was a registered owner
-- at Send (a later drop is "recipient left").
CREATE TABLE exchange_messages (
    tenant  TEXT   NOT NULL DEFAULT '',
    id      TEXT   NOT NULL,
    sender  TEXT   NOT NULL,
    body    TEXT   NOT NULL,
    known   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id)
);

-- The ledger: one row per (message, recipient), so "exactly one state"
-- holds by construction (issue 17). recipient is '' for the outbox row,
-- which Collect replaces by one row per recipient considered. holder is
-- whose flow holds the row (the sender for outbox and dead rows, the
-- recipient for inbox rows) and holder_reg its registration number (an
-- owner registered anew starts its counters afresh); ord and seq place an inbox row (Receive
-- order, the Cursor) and an outbox row (seq); a dead row has ord 0, its
-- dead-letter number in seq (the DeadLetters cursor), reason and dead_at; done_at is when the row reached a terminal state
-- (popped, returned, evicted), for the retention.
CREATE TABLE exchange_ledger (
    tenant    TEXT   NOT NULL DEFAULT '',
    message   TEXT   NOT NULL,
    recipient TEXT   NOT NULL,
    sender    TEXT   NOT NULL,
    state     TEXT   NOT NULL,
    holder    TEXT   NOT NULL,
    holder_reg BIGINT NOT NULL DEFAULT 0,
    ord       BIGINT NOT NULL DEFAULT 0,
    seq       BIGINT NOT NULL DEFAULT 0,
    reason    BIGINT NOT NULL DEFAULT 0,
    dead_at   BIGINT NOT NULL DEFAULT 0,
    done_at   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, message, recipient)
);
CREATE INDEX exchange_ledger_by_holder ON exchange_ledger (tenant, holder, state, ord, seq);
CREATE INDEX exchange_ledger_by_seq ON exchange_ledger (tenant, holder, holder_reg, seq) WHERE ord > 0;
CREATE INDEX exchange_ledger_by_done ON exchange_ledger (tenant, done_at) WHERE done_at > 0;

-- One row per inbox (sender's, at owner): its creation ordinal and how
-- many messages it holds, for O(1) bounds; deleted when reclaimed.
CREATE TABLE exchange_inboxes (
    tenant TEXT   NOT NULL DEFAULT '',
    owner  TEXT   NOT NULL,
    sender TEXT   NOT NULL,
    ord    BIGINT NOT NULL,
    count  BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, owner, sender)
);
CREATE INDEX exchange_inboxes_by_sender ON exchange_inboxes (tenant, sender);

-- Send's request ids (docs/design.md#branches, the idempotency rule: per
-- sender, 10 minutes or the last 10,000): what a repeat needs to answer,
-- not the body (the body is read from exchange_messages while held).
CREATE TABLE exchange_requests (
    tenant     TEXT   NOT NULL DEFAULT '',
    sender     TEXT   NOT NULL,
    request_id TEXT   NOT NULL,
    n          BIGINT NOT NULL,
    created_ns BIGINT NOT NULL,
    message    TEXT   NOT NULL,
    created_at TEXT   NOT NULL,
    recipient  TEXT   NOT NULL,
    channel    TEXT,
    digest     TEXT   NOT NULL,
    PRIMARY KEY (tenant, sender, request_id)
);
CREATE INDEX exchange_requests_by_sender ON exchange_requests (tenant, sender, n);
CREATE INDEX exchange_requests_by_age ON exchange_requests (tenant, created_ns);

-- +goose Down
DROP TABLE exchange_requests;
DROP TABLE exchange_inboxes;
DROP TABLE exchange_ledger;
DROP TABLE exchange_messages;
DROP TABLE exchange_owners;
DROP TABLE exchange_counters;
