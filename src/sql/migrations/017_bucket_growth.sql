-- Since 0.1: the key bucket count of a Tier A consumer that did not set
-- "buckets" grows with its workload (prepare_exclusive in
-- src/sql/functions/03_exclusive.sql): consumer.buckets is the grown count
-- (null: the default, 16); an explicit "buckets" in settings is honoured as
-- it is and never grown. Since counts can differ between windows, each chunk
-- records the count its bucket is of (nbuckets); every chunk before this
-- migration was planned with its consumer's persisted count. Every batch
-- holding a chunk has finished before the update runs (it waits for their
-- row locks).

alter table :KEYQ_SCHEMA.consumer add column buckets int;
alter table :KEYQ_SCHEMA.chunk add column nbuckets int;
update :KEYQ_SCHEMA.chunk k set nbuckets = coalesce((c.settings->>'buckets')::int, 16)
  from :KEYQ_SCHEMA.consumer c where c.consumer_id = k.consumer_id;
alter table :KEYQ_SCHEMA.chunk alter column nbuckets set not null;
