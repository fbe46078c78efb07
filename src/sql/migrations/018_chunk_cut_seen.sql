-- Since 0.1: split_chunks (src/sql/functions/08_split.sql) remembers that it
-- read a free chunk and left it whole (it fits one batch, or no key-safe cut
-- divides it): cut_seen_tick is the chunk's end_tick at that look. The
-- planner reads such a chunk again only once it has grown to a later tick
-- (plan_chunks moves end_tick), not on every prepare of every worker: with
-- keys interleaved across a bucket, each prepare re-read every free chunk
-- (rows read per delivered event 5.2 against 1.06 without cutting, in the
-- bench's Tier A row). Null: not looked at yet.

alter table :KEYQ_SCHEMA.chunk add column cut_seen_tick bigint;
