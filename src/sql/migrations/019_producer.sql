-- Since 0.2: the dedup table has no foreign key to queue. Its check ran once
-- per claimed key, about a third of the claim of a 100,000-key sendBatch.
-- Every claim is made by an engine function that read the queue row first,
-- and drop_queue deletes the queue's dedup rows itself (after dropping the
-- queue's log: a claim still in flight then fails on its event insert and
-- rolls back with it).
alter table :KEYQ_SCHEMA.dedup drop constraint dedup_queue_id_fkey;
