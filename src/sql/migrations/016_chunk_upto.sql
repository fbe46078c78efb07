-- Since 0.1: a Tier A chunk may end at a position. The planner cuts a
-- bucket that holds more events than a batch takes into pieces of one
-- batch each (split_chunks in src/sql/functions/03_exclusive.sql): a piece
-- holds the events of its bucket and window after (after_txid, after_id)
-- up to and including (upto_txid, upto_id); null, as for every chunk
-- before this migration, means to the window's end. So a batch that claims
-- one piece leaves the others free, and a slow batch holds only its piece.

alter table :KEYQ_SCHEMA.chunk add column upto_txid xid8, add column upto_id bigint;
