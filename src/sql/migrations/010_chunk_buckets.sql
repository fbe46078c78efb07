-- Since 0.1: Tier A chunks are cut by key bucket, not by position. A chunk
-- is one bucket (slot_of(key, 16)) of a window range, read from its
-- position to the range's end; it no longer counts its events (n).
--
-- Chunks planned by an older keyq were cut by position: each covers the n
-- events after its position in the whole window, so it cannot be read by
-- bucket. Every batch holding a chunk has finished before this runs (the first ALTER
-- TABLE waits for their row locks), so every chunk left is unclaimed. They
-- are replaced, per planned window (start_tick, end_tick), by one chunk per
-- bucket starting at the window's lowest remaining position:
-- - no event is lost: every event of the window after that position is in
--   one of the new chunks, and every event before it was consumed (the
--   position chunks partition a window in log order, and a chunk is gone or
--   advanced only when its events committed);
-- - events consumed between two remaining position chunks of one window
--   (chunks finished out of order by concurrent workers) come once more:
--   the only duplicates, a few batches at most, and none when the window's
--   chunks were finished in order. Resetting the cursor to the oldest open
--   tick instead would deliver every finished chunk of those windows again.
-- Windows with no chunk left were consumed whole; the cursor (oldest open
-- tick, planned frontier) stays valid and the planner goes on from its
-- frontier. 16 is xbuckets() (a migration calls no engine function).

alter table :KEYQ_SCHEMA.chunk add column bucket int;

insert into :KEYQ_SCHEMA.chunk (consumer_id, chunk_id, start_tick, end_tick, after_txid, after_id, n, bucket)
select w.consumer_id, pg_catalog.nextval(':KEYQ_SCHEMA.chunk_id_seq'), w.start_tick, w.end_tick,
       w.after_txid, w.after_id, 0, b
  from (select distinct on (consumer_id, start_tick, end_tick) consumer_id, start_tick, end_tick, after_txid, after_id
          from :KEYQ_SCHEMA.chunk
         order by consumer_id, start_tick, end_tick, after_txid, after_id) w
 cross join pg_catalog.generate_series(0, 15) b
 order by w.consumer_id, w.start_tick, b;

delete from :KEYQ_SCHEMA.chunk where bucket is null;

alter table :KEYQ_SCHEMA.chunk drop column n, alter column bucket set not null;
create index on :KEYQ_SCHEMA.chunk (consumer_id, bucket, chunk_id);
