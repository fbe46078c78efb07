-- keyq engine, part 3: Tier A, the exclusive consumer. Many workers share one
-- consumer; at most one of them processes a key at any instant; no order.
--
-- A planner (run in the ticker's short transaction, never in a batch) cuts
-- each new window into chunks of at most chunk_size events, so one big window
-- still feeds every worker. A batch claims one chunk with SKIP LOCKED (never
-- waiting on another worker), reads it, and try-locks every key of the batch
-- in the same statement. Deleting the claimed chunk row commits with the
-- batch; a rollback or a killed backend puts it back at once.

-- Cuts the windows after the consumer's planned frontier into chunks, and
-- moves its cursor (used by rotation and tick pruning) to the oldest tick
-- that still has unfinished chunks.
create function :KEYQ_SCHEMA.plan_chunks(c :KEYQ_SCHEMA.consumer, chunk_size int) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  cur :KEYQ_SCHEMA.cursor;
  frontier bigint;
  latest bigint;
  s1 pg_snapshot;
  s2 pg_snapshot;
  n int := 0;
  oldest bigint;
begin
  -- Wait for a concurrent planner (a short transaction, never a batch): once
  -- it commits, this caller sees its chunks instead of finding none.
  perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('plan', c.consumer_id));
  select * into cur from :KEYQ_SCHEMA.cursor where consumer_id = c.consumer_id and slot = 0;
  frontier := coalesce(cur.end_tick_id, cur.tick_id);
  select max(tick_id) into latest from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id > frontier;
  if latest is not null then
    select tick_snapshot into s1 from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = frontier;
    select tick_snapshot into s2 from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = latest;
    insert into :KEYQ_SCHEMA.chunk (consumer_id, chunk_id, start_tick, end_tick, after_txid, after_id, n)
    select c.consumer_id, nextval(':KEYQ_SCHEMA.chunk_id_seq'), frontier, latest,
           coalesce(w.prev_txid, '0'::xid8), coalesce(w.prev_id, 0), least(chunk_size, w.total - w.rn)
      from (select row_number() over o - 1 as rn, count(*) over () as total,
                   lag(e.ev_txid) over o as prev_txid, lag(e.ev_id) over o as prev_id
              from :KEYQ_SCHEMA.window_events(c.queue_id, s1, s2, '0'::xid8, 0, 2147483647) e
            window o as (order by e.ev_txid, e.ev_id)) w
     where w.rn % chunk_size = 0
     order by w.rn;
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

-- The run's first call for an exclusive consumer: tick the queue, then plan
-- chunks, in this short transaction of its own.
create function :KEYQ_SCHEMA.prepare_exclusive(queue text, consumer text, chunk_size int) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer); t jsonb;
begin
  t := :KEYQ_SCHEMA.tick(queue);
  return jsonb_build_object('tick', t->'tick', 'chunks', :KEYQ_SCHEMA.plan_chunks(c, chunk_size));
end $$;

-- Adds "locked" to each event: true when this transaction now holds the key
-- (or the event has no key). One statement for the whole batch; the lock is
-- namespaced by schema and consumer, and re-entrant inside the transaction.
create function :KEYQ_SCHEMA.lock_keys(c :KEYQ_SCHEMA.consumer, events jsonb) returns jsonb
language sql volatile
set search_path = pg_catalog, pg_temp
as $$
  select coalesce(jsonb_agg(x.e || jsonb_build_object('locked',
           x.e->>'key' is null
           or pg_try_advisory_xact_lock(hashtextextended(x.e->>'key', :KEYQ_SCHEMA.lock_key('xkey', c.consumer_id))))
           order by x.ord), '[]')
  from (select e, ord from jsonb_array_elements(events) with ordinality as t(e, ord) order by ord) x
$$;

-- Distinct keys one batch may lock. Advisory locks live in the server's
-- shared lock table (max_locks_per_transaction * (max_connections +
-- max_prepared_transactions) entries, shared by every session): a batch
-- locking one entry per key could fill it (53200 "out of shared memory",
-- seen by every session). A batch takes at most a sixteenth of the table,
-- and never less than one transaction's own share.
create function :KEYQ_SCHEMA.key_budget() returns int
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select greatest(current_setting('max_locks_per_transaction')::int,
                  current_setting('max_locks_per_transaction')::int
                  * (current_setting('max_connections')::int + current_setting('max_prepared_transactions')::int) / 16)
$$;

-- How many leading events of evs hold at most budget distinct keys (null
-- keys take no lock). The rest stays in the chunk for a later batch: nothing
-- is skipped, reordered or charged a retry.
create function :KEYQ_SCHEMA.keys_prefix(evs :KEYQ_SCHEMA.event[], budget int) returns int
language sql immutable
set search_path = pg_catalog, pg_temp
as $$
  select coalesce(max(i), 0)::int
    from (select i, sum(fresh::int) over (order by i) as keys
            from (select i, (evs[i]).ev_key is not null
                         and row_number() over (partition by (evs[i]).ev_key order by i) = 1 as fresh
                    from generate_subscripts(evs, 1) i) f) k
   where keys <= budget
$$;

-- One batch of an exclusive consumer: due retries first, then one chunk
-- claimed without waiting; per-key try-locks for all of them.
create function :KEYQ_SCHEMA.receive_exclusive(queue text, consumer text, max_events int) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer);
  ch :KEYQ_SCHEMA.chunk;
  evs :KEYQ_SCHEMA.event[];
  take int;
  last :KEYQ_SCHEMA.event;
  out jsonb;
  keys_left int := :KEYQ_SCHEMA.key_budget();
begin
  if c.kind <> 'exclusive' then
    raise exception 'Consumer "%" of queue "%" is a % consumer, not exclusive; use another consumer name.', consumer, queue, c.kind
      using errcode = 'KQ003', hint = 'KEYQ:CONSUMER_KIND_MISMATCH';
  end if;
  out := :KEYQ_SCHEMA.take_retries(c.consumer_id, 0, least(max_events, keys_left));
  take := max_events - jsonb_array_length(out);
  keys_left := keys_left - (select count(distinct e->>'key') from jsonb_array_elements(out) e)::int;
  if take > 0 and keys_left > 0 then
    select * into ch from :KEYQ_SCHEMA.chunk where consumer_id = c.consumer_id
     order by chunk_id limit 1 for update skip locked;
    if found then
      take := least(take, ch.n);
      select array_agg(w order by w.ev_txid, w.ev_id) into evs
        from :KEYQ_SCHEMA.window_events(c.queue_id,
               (select tick_snapshot from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = ch.start_tick),
               (select tick_snapshot from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = ch.end_tick),
               ch.after_txid, ch.after_id, take) w;
      take := :KEYQ_SCHEMA.keys_prefix(evs, keys_left);
      evs := evs[1:take];
      if take >= ch.n or take = 0 then
        delete from :KEYQ_SCHEMA.chunk where consumer_id = c.consumer_id and chunk_id = ch.chunk_id;
      else
        last := evs[take];
        update :KEYQ_SCHEMA.chunk set after_txid = last.ev_txid, after_id = last.ev_id, n = ch.n - take
         where consumer_id = c.consumer_id and chunk_id = ch.chunk_id;
      end if;
      out := out || coalesce((select jsonb_agg(:KEYQ_SCHEMA.event_json(evs[i]) order by i)
                                from generate_subscripts(evs, 1) i), '[]');
    end if;
  end if;
  return jsonb_build_object('busy', false, 'events', :KEYQ_SCHEMA.lock_keys(c, out));
end $$;
