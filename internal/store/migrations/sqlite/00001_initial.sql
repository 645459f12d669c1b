-- historyd schema, version 1: branches, their messages, their retained
-- event log, the idempotency records (docs/decisions/0015-sqlite-engine.md).
-- The PostgreSQL twin is ../postgres/00001_initial.sql; every place the two
-- dialects differ is marked "dialect:". Migrations are additive (expand,
-- then contract in a later release) so a server one version older keeps
-- working on a migrated database during a rolling upgrade.
--
-- Every primary key starts with tenant, one default tenant ('') for now,
-- so that tenant isolation later needs no data migration.
--
-- dialect: ids are 16-byte BLOBs here, uuid in PostgreSQL; JSON is TEXT in
-- both (never jsonb: a message must come back byte for byte, and jsonb
-- reorders keys and drops duplicates); integers are INTEGER (64-bit) here,
-- bigint there; floats REAL here, double precision there.

-- +goose Up
CREATE TABLE store_meta (
    tenant TEXT NOT NULL DEFAULT '',
    key    TEXT NOT NULL,
    value  TEXT NOT NULL,
    PRIMARY KEY (tenant, key)
);

CREATE TABLE branches (
    tenant          TEXT    NOT NULL DEFAULT '',
    id              BLOB    NOT NULL,
    -- The incarnation belongs to the database: a watch cursor from before a
    -- restart resumes after it (issue 14).
    incarnation     BLOB    NOT NULL,
    created_at      REAL    NOT NULL,
    metadata        TEXT    NOT NULL,  -- LionAGI JSON object, exact text
    name            TEXT,
    user_name       TEXT,              -- "user" is reserved in PostgreSQL
    parent_id       BLOB,
    fork_point      BLOB,
    pile_id         BLOB    NOT NULL,
    pile_created_at REAL    NOT NULL,
    prog_id         BLOB    NOT NULL,
    prog_created_at REAL    NOT NULL,
    head            INTEGER NOT NULL,  -- sequence of the last event
    epoch           INTEGER NOT NULL DEFAULT 0, -- incremented by every clear
    sel_epoch       INTEGER NOT NULL DEFAULT 0, -- incremented by every change of the selection
    selected        TEXT,              -- JSON array of ids; NULL when unset
    system_id       BLOB,              -- the message at index 0, if any
    next_pos        INTEGER NOT NULL DEFAULT 0, -- the next entry position
    next_rank       INTEGER NOT NULL DEFAULT 0, -- the next collections rank
    message_count   INTEGER NOT NULL DEFAULT 0, -- the system included
    PRIMARY KEY (tenant, id)
);

-- One row per current message. pos orders the full order (-1 for the
-- system, index 0); kind feeds the typed views; rank orders the Pile's
-- collections on export (issue 13 item 1). Message ids are unique within a
-- branch only (an import may repeat another branch's ids).
CREATE TABLE messages (
    tenant    TEXT    NOT NULL DEFAULT '',
    branch_id BLOB    NOT NULL,
    id        BLOB    NOT NULL,
    pos       INTEGER NOT NULL,
    kind      INTEGER NOT NULL,
    rank      INTEGER NOT NULL,
    seq       INTEGER NOT NULL,  -- the sequence of the write
    body      TEXT    NOT NULL,  -- to_dict(mode='json'), exact text
    PRIMARY KEY (tenant, branch_id, id)
);
CREATE UNIQUE INDEX messages_by_pos ON messages (tenant, branch_id, pos);
CREATE INDEX messages_by_kind ON messages (tenant, branch_id, kind, pos);

-- The retained event log (DESIGN.md "Sequences, events and watch"); events
-- older than the retention are deleted as new ones are written. Keyed by
-- the branch's incarnation, not its id: a subscriber still catching up
-- when the branch is deleted reads the log through BRANCH_DELETED while a
-- new branch of the same id starts its own; a dead incarnation's events
-- go once no subscriber needs them.
CREATE TABLE events (
    tenant       TEXT    NOT NULL DEFAULT '',
    incarnation  BLOB    NOT NULL,
    seq          INTEGER NOT NULL,
    commit_first INTEGER NOT NULL,
    commit_last  INTEGER NOT NULL,
    kind         INTEGER NOT NULL,
    msg_index    INTEGER NOT NULL,  -- -1 when the event wrote no message
    msg_id       BLOB,              -- the message written; NULL when none
    -- The message, the progression or the branch, as JSON. NULL for an
    -- event whose message is still the current version in messages (the
    -- row with msg_id and seq): the message is stored once; rewriting or
    -- deleting that version first copies it here.
    body         TEXT,
    PRIMARY KEY (tenant, incarnation, seq)
);

-- Idempotency records within the window (docs/decisions/0010): scope is
-- the principal's, a branch incarnation's or a deleted branch's.
CREATE TABLE requests (
    tenant     TEXT    NOT NULL DEFAULT '',
    scope      TEXT    NOT NULL,
    request_id TEXT    NOT NULL,
    op         TEXT    NOT NULL,
    n          INTEGER NOT NULL,  -- the scope's ordinal: its oldest are forgotten past the bound
    created_ns INTEGER NOT NULL,  -- unix nanoseconds, for the window
    result     TEXT    NOT NULL,  -- the remembered response, as JSON
    PRIMARY KEY (tenant, scope, request_id)
);
CREATE INDEX requests_by_age ON requests (tenant, created_ns);
CREATE INDEX requests_by_scope ON requests (tenant, scope, n);

-- +goose Down
DROP TABLE requests;
DROP TABLE events;
DROP TABLE messages;
DROP TABLE branches;
DROP TABLE store_meta;
