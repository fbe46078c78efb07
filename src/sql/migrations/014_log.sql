-- Since 0.1: the log can be read again. Functions are in
-- src/sql/functions/07_positions.sql (positions, seek, key history,
-- operator controls) and 01_engine.sql (retention in rotation).
--
-- queue.retention: events younger than this are never truncated by
-- rotation, whatever the cursors say (null: no retention, as before).
-- queue.floor_tick: the start of the retained range. Every event its
-- snapshot does not see is still in the log; rotation moves it forward
-- when it truncates a ring table ("earliest" resolves to it).
-- queue.left_at[i]: when ring table i stopped being the current table (its
-- newest event is older than that); null for a table never written.
-- consumer.paused_at: set by an operator's pause; a paused consumer reads
-- nothing until it is resumed.

alter table :KEYQ_SCHEMA.queue
  add column retention interval,
  add column floor_tick bigint,
  add column left_at timestamptz[];

-- Existing queues: the oldest tick left is the floor (pruning kept every
-- tick a cursor needs); every ring table may hold events up to the last
-- rotation.
update :KEYQ_SCHEMA.queue q
   set floor_tick = (select pg_catalog.min(t.tick_id) from :KEYQ_SCHEMA.tick t where t.queue_id = q.queue_id),
       left_at = pg_catalog.array_fill(q.rotated_at, array[q.ntables::int]);

alter table :KEYQ_SCHEMA.consumer add column paused_at timestamptz;
