-- historyd schema, version 4 (postgres): a released lease gives the message
-- back as if never taken (docs/decisions/0020). Additive: one column with a
-- constant default. The twin is ../sqlite/00004_release_restores.sql.
--
-- +goose Up
-- prev_held is held as it was when the row's current lease took it: 1 when
-- the lease before still held it (past its deadline, taken by no one else:
-- a lease ends by Ack, Nack or another taker), else 0. A Release of the
-- current lease (one the server took and never handed out) puts it back, so
-- the receipt of the lease before acknowledges the message again. A lease
-- taken by a server of version 3 (during a rolling upgrade) leaves it as an
-- earlier lease set it; the only effect is on a Release of that lease by a
-- newer server, which may then hold the row for a receipt that had been
-- nacked.
ALTER TABLE exchange_ledger ADD COLUMN prev_held BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE exchange_ledger DROP COLUMN prev_held;
