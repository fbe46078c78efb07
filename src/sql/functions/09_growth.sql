-- keyq engine, part 9: the key bucket count of a Tier A consumer follows
-- its workload (see 03_exclusive.sql). A consumer created without "buckets"
-- starts at 16; when a batch finds no chunk free while at least as many
-- other batches are in flight as there are buckets (workers outnumber
-- buckets), receive_exclusive
-- answers "starved" with the count it saw, and that worker's next
-- prepare_exclusive doubles it (up to 256), once per count however many
-- workers starved. The slot index for the new count is built first, as
-- subscribe builds one (never in a batch): in place when the log is small,
-- else by the client with CREATE INDEX CONCURRENTLY outside a transaction;
-- until it is valid the count stays. Windows planned after the growth use
-- the new count, and every chunk of an older count that no batch holds is
-- cut into the new count's buckets (recut_chunks). An explicit "buckets" is
-- never grown.

-- The first key of the shared advisory lock each batch of a growing
-- consumer holds while it has work (the second is the consumer's id): how
-- starved() counts the batches in flight, in pg_locks.
create function :KEYQ_SCHEMA.batch_lock_class() returns int
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  return hashtext(:KEYQ_SCHEMA_NAME || ':xbatch');
end $$;

-- Whether a batch of c that found no chunk free starves for buckets: c may
-- grow, and at least as many other batches of c are in flight as c has
-- buckets (workers outnumber buckets). Batches that only churn through
-- empty chunks of sparse windows hold many chunk rows but are few: they do
-- not count as starvation, since more buckets would not help them.
create function :KEYQ_SCHEMA.starved(c :KEYQ_SCHEMA.consumer) returns boolean
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  return (
    select not (c.settings ? 'buckets') and :KEYQ_SCHEMA.consumer_buckets(c) < 256
       and (select count(*) from pg_locks l
             where l.locktype = 'advisory' and l.granted and l.objsubid = 2
               and l.database = (select oid from pg_database where datname = current_database())
               and l.classid = :KEYQ_SCHEMA.batch_lock_class()::oid and l.objid = c.consumer_id::oid)
           >= :KEYQ_SCHEMA.consumer_buckets(c));
end $$;

-- Doubles c's bucket count when it is still grow_from (a worker saw its
-- batches starve at that count; a second worker's report of the same
-- starvation finds it grown and does nothing). Null when done or nothing
-- to do; else the slot index work the client does first (as subscribe's
-- answer: "build" statements to run outside a transaction, or "wait"),
-- then it calls again. Under the queue's subscribe lock (index work) and
-- the consumer's plan lock (the count planners read).
create function :KEYQ_SCHEMA.grow_buckets(c :KEYQ_SCHEMA.consumer, grow_from int, inline boolean) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare pending jsonb;
begin
  if c.settings ? 'buckets' or :KEYQ_SCHEMA.consumer_buckets(c) <> grow_from or grow_from >= 256 then
    return null;
  end if;
  perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('subscribe', c.queue_id));
  perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('plan', c.consumer_id));
  select * into c from :KEYQ_SCHEMA.consumer where consumer_id = c.consumer_id;
  if c.settings ? 'buckets' or :KEYQ_SCHEMA.consumer_buckets(c) <> grow_from then
    return null;
  end if;
  pending := :KEYQ_SCHEMA.ensure_slot_index(c.queue_id, grow_from * 2, inline);
  if pending is not null then
    return pending;
  end if;
  update :KEYQ_SCHEMA.consumer set buckets = grow_from * 2 where consumer_id = c.consumer_id;
  return null;
end $$;

-- Cuts each chunk of c planned with fewer buckets than c has now, and that
-- no batch holds, into the current count's buckets: bucket b of n is
-- buckets b, b + n, ... of the new count, each a chunk with the same window,
-- position and end. Returns the chunks added.
create function :KEYQ_SCHEMA.recut_chunks(c :KEYQ_SCHEMA.consumer) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  n int := :KEYQ_SCHEMA.consumer_buckets(c);
  ch :KEYQ_SCHEMA.chunk;
  added int := 0;
  got int;
begin
  for ch in
    select * from :KEYQ_SCHEMA.chunk k where k.consumer_id = c.consumer_id and k.nbuckets < n
     order by k.chunk_id for update skip locked
  loop
    insert into :KEYQ_SCHEMA.chunk (consumer_id, chunk_id, start_tick, end_tick, after_txid, after_id, bucket, nbuckets, upto_txid, upto_id)
    select c.consumer_id, nextval(':KEYQ_SCHEMA.chunk_id_seq'), ch.start_tick, ch.end_tick, ch.after_txid, ch.after_id,
           ch.bucket + i * ch.nbuckets, n, ch.upto_txid, ch.upto_id
      from generate_series(1, n / ch.nbuckets - 1) i order by i;
    get diagnostics got = row_count;
    added := added + got;
    update :KEYQ_SCHEMA.chunk set nbuckets = n where consumer_id = c.consumer_id and chunk_id = ch.chunk_id;
  end loop;
  return added;
end $$;
