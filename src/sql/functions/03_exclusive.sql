-- keyq engine, part 3: Tier A, the exclusive consumer. Many workers share one
-- consumer; at most perKey (default 1) of them process a key at any instant;
-- no order.
--
-- Work is cut by key, not by position: a planner (run in the ticker's short
-- transaction, never in a batch) gives each new window range one chunk per
-- key bucket (consumer_buckets(c) buckets of slot_of(key, buckets), read
-- through the slot index for that count), so one key lies in one chunk per
-- window. The bucket count is persisted per consumer (option "buckets",
-- default 16): the number of batches one window can feed at once. A
-- consumer that did not set it grows it when workers starve (09_growth.sql);
-- each chunk records the count of its bucket (nbuckets, migration 017), so
-- windows planned with different counts are each read with their own. Key
-- bucket b of N is the union of buckets b, b + N, b + 2N, ... of 2N (slot_of
-- is a modulo), so chunks of two counts overlap when their buckets agree
-- modulo the smaller count (claim_chunk, split_chunks: counts are powers of
-- two, so that test is exact). Exclusion never depends on the
-- buckets: it is the key's advisory lock, taken by every batch.
-- The planner reads no event of a large window: a batch reads its chunk's
-- rows once, through the slot index (a small one, up to 64 events, it reads
-- once to give chunks only to the buckets that have events). A batch claims chunks with SKIP LOCKED (never waiting on
-- another worker), the oldest chunk of a bucket first, so a key's later
-- window is taken while its earlier one is held only when no other chunk is
-- free (a key held across windows is the only source of contention); it
-- reads them and try-locks every key of the batch in the same statement
-- (the backstop of the guarantee, and what separates retried events).
--
-- A batch holds only what it reads: after its first chunk, a batch claims
-- each further chunk inside a subtransaction, and one that does not fit
-- whole in what the batch still takes is given back by rolling that
-- subtransaction back, which releases its row lock at once (other workers
-- take it while this batch runs). A batch's first chunk is read in part
-- only when that bucket of the window holds more events than the batch
-- takes and no key-safe cut divides it: the planner cuts such buckets into
-- pieces of one batch before any batch holds them (split_chunks in
-- 08_split.sql; a piece
-- ends at its upto position, migration 015), so the rest of a bucket does
-- not wait for a slow batch. Deleting or advancing a claimed chunk row commits with the batch;
-- a rollback or a killed backend puts it back at once. The chunk table (with
-- its bucket column since migration 010) is in src/sql/migrations/.

-- The default key bucket count of an exclusive consumer: the parallelism of
-- one window (one worker per bucket at a time) and the N of the slot index
-- it reads through (shared with Tier B consumers of N = 16).
create function :KEYQ_SCHEMA.xbuckets() returns int
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  return 16;
end $$;

-- The key bucket count of exclusive consumer c for windows planned now: the
-- one set when it was created ("buckets" in its settings, a power of two
-- from 16 to 256, never changed), else the count it grew to (consumer.buckets,
-- 09_growth.sql), else 16.
create function :KEYQ_SCHEMA.consumer_buckets(c :KEYQ_SCHEMA.consumer) returns int
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  return coalesce((c.settings->>'buckets')::int, c.buckets, :KEYQ_SCHEMA.xbuckets());
end $$;

-- Gives the window range after the consumer's planned frontier one chunk
-- per bucket, without reading an event: a bucket whose newest chunk is
-- still untouched and unclaimed has it extended to the new tick instead (a
-- started chunk cannot grow: its position is inside its own range). Moves
-- the cursor (used by rotation and tick pruning) to the oldest tick that
-- still has unfinished chunks.
-- Generic plans only: a custom plan knows generate_series(0, nb - 1) yields
-- nb rows where a generic one guesses 1,000, so plpgsql's plan cache kept
-- the chunk insert custom and planned it again on every call (0.16-0.20 ms
-- of the ~1.1 ms a prepare costs, pg_stat_statements with track_planning).
create function :KEYQ_SCHEMA.plan_chunks(c :KEYQ_SCHEMA.consumer, chunk_size int) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_variable
declare
  cur :KEYQ_SCHEMA.cursor;
  frontier bigint;
  latest bigint;
  n int := 0;
  oldest bigint;
  present int[];
  small bigint;
  plan_read constant int := 64;  -- events a planner reads at most (then: every bucket)
  nb int := :KEYQ_SCHEMA.consumer_buckets(c);
begin
  -- With a tick to plan, wait for a concurrent planner (a short transaction,
  -- never a batch): once it commits, this caller sees its chunks instead of
  -- finding none. With none (the frontier as committed is the newest tick),
  -- there is nothing to wait for: a planner at work moves the cursor itself,
  -- so this caller does not queue behind it (idle workers woken together
  -- would otherwise plan one after another).
  select * into cur from :KEYQ_SCHEMA.cursor where consumer_id = c.consumer_id and slot = 0;
  frontier := coalesce(cur.end_tick_id, cur.tick_id);
  if exists (select 1 from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id > frontier) then
    perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('plan', c.consumer_id));
  elsif not pg_try_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('plan', c.consumer_id)) then
    return 0;
  end if;
  select * into cur from :KEYQ_SCHEMA.cursor where consumer_id = c.consumer_id and slot = 0;
  frontier := coalesce(cur.end_tick_id, cur.tick_id);
  select max(tick_id) into latest from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id > frontier;
  if latest is not null then
    -- A small window (a steady trickle ticked often) is read once for the
    -- buckets its keys fall in, and only those get a chunk: a batch then
    -- claims the chunk that holds the event instead of reading and deleting
    -- up to a chunk per bucket first. A window's events are fixed once its
    -- end tick committed. A large one gets a chunk per bucket, unread.
    select case when count(*) > plan_read then null
                else coalesce(array_agg(distinct :KEYQ_SCHEMA.slot_of(w.ev_key, nb)), '{}') end,
           count(*)
      into present, small
      from unnest(:KEYQ_SCHEMA.window_array(c.queue_id,
             (select tick_snapshot from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = frontier),
             (select tick_snapshot from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = latest),
             '0'::xid8, 0, plan_read + 1)) w;
    with open as (
      select k.chunk_id from :KEYQ_SCHEMA.chunk k
       where k.consumer_id = c.consumer_id and k.end_tick = frontier and k.after_txid = '0'::xid8 and k.after_id = 0
         and k.upto_txid is null  -- a piece (split_chunks) ends at its position, never grows
         and k.nbuckets = nb  -- a chunk of an older count is not grown
       for update skip locked
    ), grown as (
      update :KEYQ_SCHEMA.chunk k set end_tick = latest from open
       where k.consumer_id = c.consumer_id and k.chunk_id = open.chunk_id
      returning k.bucket
    )
    -- A new chunk of a window that holds at most chunk_size events (counted
    -- just now) needs no cut: split_chunks need not count the window again.
    insert into :KEYQ_SCHEMA.chunk (consumer_id, chunk_id, start_tick, end_tick, after_txid, after_id, bucket, nbuckets, cut_seen_tick)
    select c.consumer_id, nextval(':KEYQ_SCHEMA.chunk_id_seq'), frontier, latest, '0'::xid8, 0, b,
           nb, case when present is not null and small <= chunk_size then latest end
      from generate_series(0, nb - 1) b
     where b not in (select bucket from grown)
       and (present is null or b = any (present))
     order by b;
    get diagnostics n = row_count;
    frontier := latest;
  end if;
  select min(start_tick) into oldest from :KEYQ_SCHEMA.chunk where consumer_id = c.consumer_id;
  oldest := coalesce(oldest, frontier);
  if cur.tick_id is distinct from oldest or cur.end_tick_id is distinct from frontier then
    update :KEYQ_SCHEMA.cursor set tick_id = oldest, end_tick_id = frontier, polled_at = now()
     where consumer_id = c.consumer_id and slot = 0;
  end if;
  return n;
end $$;

-- The run's first call for an exclusive consumer: tick the queue, grow the
-- key bucket count when a batch of this worker starved at count grow_from
-- (09_growth.sql: the answer may ask for the slot index first, as subscribe
-- does), cut chunks of an older count by the current one, plan chunks and
-- cut the large ones into pieces of chunk_size events (the run's
-- maxEvents), in this short transaction of its own.
create function :KEYQ_SCHEMA.prepare_exclusive(queue text, consumer text, chunk_size int,
                                               grow_from int default null, index_inline boolean default false) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('consume', queue, consumer);
declare c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer); t jsonb; pending jsonb;
begin
  if grow_from is not null then  -- before the tick: its locks come after the subscribe lock
    pending := :KEYQ_SCHEMA.grow_buckets(c, grow_from, index_inline);
    c := :KEYQ_SCHEMA.get_consumer(queue, consumer);
  end if;
  t := :KEYQ_SCHEMA.tick(queue);
  perform :KEYQ_SCHEMA.recut_chunks(c);
  -- "busy": another session was writing a tick (its snapshot may predate commits this caller heard of).
  return jsonb_build_object('tick', t->'tick', 'chunks', :KEYQ_SCHEMA.plan_chunks(c, chunk_size) + :KEYQ_SCHEMA.split_chunks(c, chunk_size),
                            'buckets', :KEYQ_SCHEMA.consumer_buckets(c), 'busy', coalesce(t->>'reason' = 'busy', false)) || coalesce(pending, '{}');
end $$;

-- The seed of key lock i (i < perKey) of exclusive consumer c: the 64-bit
-- lock of key K is hashtextextended(K, seed), namespaced by schema and scope.
-- The scope is the consumer (lock 0 keeps the seed of keyq 0.1, so older
-- workers still exclude newer ones) or the consumer's lockScope name, which
-- consumers of one queue or several share.
create function :KEYQ_SCHEMA.key_seed(c :KEYQ_SCHEMA.consumer, i int) returns bigint
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  return case when c.settings ? 'lockScope' then :KEYQ_SCHEMA.lock_key('xscope:' || (c.settings->>'lockScope'), i)
                when i = 0 then :KEYQ_SCHEMA.lock_key('xkey', c.consumer_id)
                else :KEYQ_SCHEMA.lock_key('xkey' || i, c.consumer_id) end;
end $$;

-- Adds "locked" to each event: true when this transaction now holds one of
-- the key's perKey locks (or the event has no key). Each distinct key is
-- tried once, lock 0 first and lock i only when locks 0..i-1 are held by
-- others, so a batch holds one lock per distinct key whatever perKey is.
-- Events already marked locked (a second look) keep their lock: their key
-- is not tried again. One statement for the whole batch. Its plan is
-- generic: with generate_series over perKey locks a custom plan always
-- looked cheaper, so it was planned again on every batch (0.12-0.14 ms).
create function :KEYQ_SCHEMA.lock_keys(c :KEYQ_SCHEMA.consumer, events jsonb) returns jsonb
language plpgsql volatile
set search_path = pg_catalog, pg_temp
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_column
begin
  return (
    with ev as (
      select e, ord from jsonb_array_elements(events) with ordinality as t(e, ord)
    ), keys as materialized (
      select k.key, case when k.held then true
                         else exists (select 1 from generate_series(0, coalesce((c.settings->>'perKey')::int, 1) - 1) i
                                       where pg_try_advisory_xact_lock(hashtextextended(k.key, :KEYQ_SCHEMA.key_seed(c, i)))) end as ok
        from (select e->>'key' as key, bool_or(coalesce((e->>'locked')::boolean, false)) as held
                from ev where e->>'key' is not null group by e->>'key') k
    )
    select coalesce(jsonb_agg(ev.e || jsonb_build_object('locked', ev.e->>'key' is null or keys.ok) order by ev.ord), '[]')
      from ev left join keys on keys.key = ev.e->>'key');
end $$;

-- Distinct keys one batch may lock. Advisory locks live in the server's
-- shared lock table (max_locks_per_transaction * (max_connections +
-- max_prepared_transactions) entries, shared by every session): a batch
-- locking one entry per key could fill it (53200 "out of shared memory",
-- seen by every session). A batch takes at most a sixteenth of the table,
-- and never less than one transaction's own share.
create function :KEYQ_SCHEMA.key_budget() returns int
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
  return greatest(current_setting('max_locks_per_transaction')::int,
                    current_setting('max_locks_per_transaction')::int
                    * (current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int) / 16);
end $$;

-- How many leading events of evs hold at most budget distinct keys (null
-- keys take no lock). The rest stays in the chunk for a later batch: nothing
-- is skipped, reordered or charged a retry.
create function :KEYQ_SCHEMA.keys_prefix(evs :KEYQ_SCHEMA.event[], budget int) returns int
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  return (
    select coalesce(max(i), 0)::int
      from (select i, sum(fresh::int) over (order by i) as keys
              from (select i, (evs[i]).ev_key is not null
                           and row_number() over (partition by (evs[i]).ev_key order by i) = 1 as fresh
                      from generate_subscripts(evs, 1) i) f) k
     where keys <= budget);
end $$;

-- The events of chunk ch after its position (and up to its end position,
-- for a piece cut by split_chunks), at most lim, in log order.
-- (plpgsql: window_slot_array is created after this file. Called, not read
-- through a language sql wrapper: one with a SET clause is never inlined,
-- so its query was parsed and planned on every call.)
create function :KEYQ_SCHEMA.chunk_events(c :KEYQ_SCHEMA.consumer, ch :KEYQ_SCHEMA.chunk, lim int) returns :KEYQ_SCHEMA.event[]
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  return (select coalesce(array_agg(w order by w.ev_txid, w.ev_id), '{}')
    from unnest(:KEYQ_SCHEMA.window_slot_array(c.queue_id,
           (select tick_snapshot from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = ch.start_tick),
           (select tick_snapshot from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = ch.end_tick),
           ch.after_txid, ch.after_id, lim, ch.nbuckets, ch.bucket)) w
   where ch.upto_txid is null or (w.ev_txid, w.ev_id) <= (ch.upto_txid, ch.upto_id));
end $$;

-- Claims the next chunk of c without waiting: a bucket with an older chunk
-- (another batch holds it, or its keys wait there) comes last, since its
-- newer chunk would collide with that batch on any key held across the two
-- windows; taken only when nothing else is free, so no chunk waits on a
-- stuck batch. Chunks in skip (given back by this batch) are not claimed.
create function :KEYQ_SCHEMA.claim_chunk(c :KEYQ_SCHEMA.consumer, skip bigint[]) returns :KEYQ_SCHEMA.chunk
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
declare ch :KEYQ_SCHEMA.chunk;
begin
  select * into ch from :KEYQ_SCHEMA.chunk k
   where k.consumer_id = c.consumer_id and k.chunk_id <> all (skip)
   order by exists (select 1 from :KEYQ_SCHEMA.chunk o
                     where o.consumer_id = k.consumer_id and o.chunk_id < k.chunk_id
                       and o.bucket % least(o.nbuckets, k.nbuckets) = k.bucket % least(o.nbuckets, k.nbuckets)),
            k.chunk_id
   limit 1 for update skip locked;
  return ch;  -- all null when none is free
end $$;

-- Reads claimed chunk ch in part (at most take events and keys_left keys),
-- advancing its position, or deleting it when read to its end.
create function :KEYQ_SCHEMA.read_chunk_part(c :KEYQ_SCHEMA.consumer, ch :KEYQ_SCHEMA.chunk, take int, keys_left int)
returns :KEYQ_SCHEMA.event[]
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  evs :KEYQ_SCHEMA.event[] := :KEYQ_SCHEMA.chunk_events(c, ch, take);
  got int := cardinality(evs);
  n int := :KEYQ_SCHEMA.keys_prefix(evs, keys_left);
  last :KEYQ_SCHEMA.event;
begin
  evs := evs[1:n];
  if n > 0 then
    last := evs[n];
  end if;
  if n = got and (got < take or (n > 0 and (last.ev_txid, last.ev_id) = (ch.upto_txid, ch.upto_id))) then
    -- Read to its end (a piece's end is its upto position).
    delete from :KEYQ_SCHEMA.chunk where consumer_id = c.consumer_id and chunk_id = ch.chunk_id;
  elsif n > 0 then
    -- The rest stays in the chunk for a later batch (nothing skipped,
    -- reordered or charged a retry).
    update :KEYQ_SCHEMA.chunk set after_txid = last.ev_txid, after_id = last.ev_id
     where consumer_id = c.consumer_id and chunk_id = ch.chunk_id;
  end if;
  return evs;
end $$;

-- One batch of an exclusive consumer: due retries first, then chunks
-- claimed without waiting (oldest of each bucket first, in plan order). The
-- first chunk is read up to max_events and the key budget (in part when it
-- holds more: its rest stays in it); every further chunk is taken only when
-- it fits whole in what the batch still takes, and given back at once
-- otherwise: it was claimed in a subtransaction, whose rollback releases the
-- row lock, so other workers take it while this batch runs. Per-key
-- try-locks for all of them. A chunk read to its end is deleted and the
-- next one taken in the same call, so empty buckets cost no batch of their
-- own. "drained": the call found no free chunk left (the next look would
-- find none either until a prepare plans a new tick, which notifies).
create function :KEYQ_SCHEMA.receive_exclusive(queue text, consumer text, max_events int) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('consume', queue, consumer);
declare
  c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer);
  ch :KEYQ_SCHEMA.chunk;
  evs :KEYQ_SCHEMA.event[];
  got_all :KEYQ_SCHEMA.event[] := '{}';
  take int;
  got int;
  out jsonb;
  keys_left int := :KEYQ_SCHEMA.key_budget();
  claims int := 0;
  given_back bigint[] := '{}';
  more boolean := true;
  none_free boolean := false;
  locked jsonb;
  nb int := :KEYQ_SCHEMA.consumer_buckets(c);
begin
  if c.kind <> 'exclusive' then
    raise exception 'Consumer "%" of queue "%" is a % consumer, not exclusive; use another consumer name.', consumer, queue, c.kind
      using errcode = 'KQ003', hint = 'KEYQ:CONSUMER_KIND_MISMATCH';
  end if;
  if c.paused_at is not null then  -- paused by an operator (07_positions.sql)
    return jsonb_build_object('busy', true, 'events', '[]'::jsonb);
  end if;
  out := :KEYQ_SCHEMA.take_retries(c.consumer_id, 0, least(max_events, keys_left));
  take := max_events - jsonb_array_length(out);
  keys_left := keys_left - (select count(distinct e->>'key') from jsonb_array_elements(out) e)::int;
  -- The first chunk: read whole, or in part when it holds more than the
  -- batch. Empty chunks (buckets with no event in their window) are deleted
  -- on the way. Bounded, with the loop below: at most 32 claims per call.
  while more and take > 0 and keys_left > 0 and cardinality(got_all) = 0
        and claims < least(2 * nb, 32) loop
    claims := claims + 1;
    ch := :KEYQ_SCHEMA.claim_chunk(c, '{}');
    none_free := ch.chunk_id is null;
    more := not none_free;  -- none free: the loop below would only look again
    exit when none_free;
    got_all := :KEYQ_SCHEMA.read_chunk_part(c, ch, take, keys_left);
    got := cardinality(got_all);
    -- Read to its end (deleted): the batch may go on to further chunks.
    more := not exists (select 1 from :KEYQ_SCHEMA.chunk where consumer_id = c.consumer_id and chunk_id = ch.chunk_id);
    take := take - got;
    keys_left := keys_left - (select count(distinct (e).ev_key) from unnest(got_all) e)::int;
  end loop;
  -- Further chunks: whole or not at all, each claimed in a subtransaction
  -- (32 claims stay below the 64 subtransaction ids a backend keeps in
  -- shared memory); the first chunk that does not fit ends the call (each
  -- one given back was read for nothing: rows read per event stay low).
  while more and take > 0 and keys_left > 0 and claims < least(2 * nb, 32)
        and cardinality(given_back) = 0 loop
    claims := claims + 1;
    begin
      ch := :KEYQ_SCHEMA.claim_chunk(c, given_back);
      if ch.chunk_id is null then
        more := false;
        none_free := true;
      else
        evs := :KEYQ_SCHEMA.chunk_events(c, ch, take + 1);
        got := cardinality(evs);
        if got > take or :KEYQ_SCHEMA.keys_prefix(evs, keys_left) < got then
          given_back := given_back || ch.chunk_id;
          raise exception 'chunk % does not fit', ch.chunk_id using errcode = 'P0KQ1';
        end if;
        delete from :KEYQ_SCHEMA.chunk where consumer_id = c.consumer_id and chunk_id = ch.chunk_id;
        got_all := got_all || evs;
        keys_left := keys_left - (select count(distinct (e).ev_key) from unnest(evs) e)::int;
        take := take - got;
      end if;
    exception when sqlstate 'P0KQ1' then
      null; -- given back: the claim's row lock went with the subtransaction
    end;
  end loop;
  -- Several chunks' events in log order, as one chunk's would be.
  out := out || coalesce((select jsonb_agg(:KEYQ_SCHEMA.event_json(e) order by e.ev_txid, e.ev_id) from unnest(got_all) e), '[]');
  locked := case when jsonb_array_length(out) = 0 then out else :KEYQ_SCHEMA.lock_keys(c, out) end;
  -- A committing batch stops holding its chunk row before it lets go of its
  -- key locks (the end of its transaction is visible before its locks are
  -- released), so a key of a chunk claimed just now can still look held for
  -- a moment. Look again twice, briefly, before calling it contended; keys
  -- held across windows by a running batch cost this look ~4 ms.
  for attempt in 1..2 loop
    exit when not exists (select 1 from jsonb_array_elements(locked) e where not (e->>'locked')::boolean);
    perform pg_sleep(0.001 * attempt * attempt);
    locked := :KEYQ_SCHEMA.lock_keys(c, locked);
  end loop;
  -- A batch with work of a consumer that may grow is counted in flight
  -- (09_growth.sql) until it ends. Nothing to take while at least as many
  -- batches are in flight as there are buckets: the worker passes "starved"
  -- (the count it saw) to its next prepare. Looked at only when no chunk
  -- was free and at least as many chunk rows are left (held) as buckets.
  if not (c.settings ? 'buckets') then
    if jsonb_array_length(locked) > 0 then
      perform pg_advisory_xact_lock_shared(:KEYQ_SCHEMA.batch_lock_class(), c.consumer_id);
    elsif none_free and nb < 256 then
      if (select count(*) from :KEYQ_SCHEMA.chunk where consumer_id = c.consumer_id) >= nb then
        if :KEYQ_SCHEMA.starved(c) then
          return jsonb_build_object('busy', false, 'events', locked, 'starved', nb, 'drained', true);
        end if;
      end if;
    end if;
  end if;
  return jsonb_build_object('busy', false, 'events', locked, 'drained', none_free);
end $$;
