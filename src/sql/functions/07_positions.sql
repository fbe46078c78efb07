-- keyq engine, part 7: the log read again. Start positions of new
-- consumers, seek of existing ones, one key's retained history, and the
-- operator's controls (pause, resume, a blocked key's head).
--
-- A position is a tick plus a place inside the window after it (Tier B: one
-- per slot): cursor (tick_id, end_tick_id, last_txid, last_id), the same
-- fields a batch leaves behind. Targets (JSON, checked by the client):
--   {"latest": true}   what commits after the call returns: a tick taken now
--   {"earliest": true} the start of the retained range (queue.floor_tick)
--   {"time": iso}      the newest retained tick at or before that time
--   {"id": "n"}        just before event n, inside its window
-- A target outside the retained range is an error (KQ030), never clamped.

-- A tick of the queue taken now, in the caller's transaction: waits for a
-- running ticker (it holds the lock for milliseconds), then takes the
-- snapshot in a statement that starts after the lock is held, as tick() does.
create function :KEYQ_SCHEMA.tick_now(q :KEYQ_SCHEMA.queue) returns bigint
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare id bigint;
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception 'A start position is taken in a READ COMMITTED transaction, not %.', current_setting('transaction_isolation')
      using errcode = 'KQ010', hint = 'KEYQ:WRONG_ISOLATION';
  end if;
  perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('tick', q.queue_id));
  insert into :KEYQ_SCHEMA.tick (queue_id, tick_id, tick_snapshot, tick_event_seq)
  values (q.queue_id, nextval(':KEYQ_SCHEMA.tick_id_seq'), pg_current_snapshot(),
          coalesce(pg_sequence_last_value(q.event_seq), 0))
  returning tick_id into id;
  return id;
end $$;

-- The oldest tick a position may use: the floor, or the oldest tick kept
-- after it (without a retention, pruning drops ticks no cursor needs).
create function :KEYQ_SCHEMA.floor_of(q :KEYQ_SCHEMA.queue) returns bigint
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select min(tick_id) from :KEYQ_SCHEMA.tick
   where queue_id = q.queue_id and tick_id >= coalesce(q.floor_tick, 0)
$$;

create function :KEYQ_SCHEMA.out_of_range(q :KEYQ_SCHEMA.queue, what text) returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare since timestamptz;
begin
  select tick_time into since from :KEYQ_SCHEMA.tick
   where queue_id = q.queue_id and tick_id = :KEYQ_SCHEMA.floor_of(q);
  raise exception '% is outside the retained range of queue "%", which starts at %; use from: "earliest", a later point, or give the queue a longer retention (keyq update-queue % --retention …).',
    what, q.queue_name, since, q.queue_name
    using errcode = 'KQ030', hint = 'KEYQ:POSITION_OUT_OF_RANGE';
end $$;

-- Resolves a target to a position. Writes nothing but, for "latest" and for
-- an event no tick covers yet, a tick.
create function :KEYQ_SCHEMA.resolve_position(q :KEYQ_SCHEMA.queue, target jsonb,
  out tick_id bigint, out end_tick_id bigint, out last_txid xid8, out last_id bigint)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  fl bigint := :KEYQ_SCHEMA.floor_of(q);
  fl_snap pg_snapshot;
  at timestamptz;
  x bigint;
  e :KEYQ_SCHEMA.event;
  newest bigint;
  passed boolean;
begin
  if target ? 'latest' then
    tick_id := :KEYQ_SCHEMA.tick_now(q);
    return;
  end if;
  if target ? 'earliest' then
    tick_id := fl;
    return;
  end if;
  if target ? 'time' then
    at := (target->>'time')::timestamptz;
    if at > clock_timestamp() then
      raise exception 'Start time % is in the future; give a past time, or from: "latest".', at
        using errcode = 'KQ030', hint = 'KEYQ:POSITION_OUT_OF_RANGE';
    end if;
    select t.tick_id into tick_id from :KEYQ_SCHEMA.tick t
     where t.queue_id = q.queue_id and t.tick_id >= fl and t.tick_time <= at
     order by t.tick_id desc limit 1;
    if tick_id is null then
      perform :KEYQ_SCHEMA.out_of_range(q, format('Start time %s', at));
    end if;
    return;
  end if;
  if target ? 'id' then
    x := (target->>'id')::bigint;
    select tick_snapshot into fl_snap from :KEYQ_SCHEMA.tick t where t.queue_id = q.queue_id and t.tick_id = fl;
    -- Ids are per queue; the log has no index on the id alone, so this
    -- reads the queue's ring tables (an operator's call, not a hot path).
    -- The queue's own partition by name, never the parent (see has_pending).
    execute format('select * from %I.%I where ev_id = $1', :KEYQ_SCHEMA_NAME, 'event_' || q.queue_id) into e using x;
    if e.ev_id is null then
      if x > coalesce(pg_sequence_last_value(q.event_seq), 0) then
        raise exception 'Queue "%" has no event %: its newest event id is % (is the id from another queue?).',
          q.queue_name, x, coalesce(pg_sequence_last_value(q.event_seq), 0)
          using errcode = 'KQ031', hint = 'KEYQ:EVENT_NOT_FOUND';
      end if;
      execute format($q$select exists (select 1 from %1$I.%2$I ev where ev.ev_id > $1
                                          and not pg_catalog.pg_visible_in_snapshot(ev.ev_txid, $2))
                         and not exists (select 1 from %1$I.%2$I ev where ev.ev_id < $1) $q$,
                     :KEYQ_SCHEMA_NAME, 'event_' || q.queue_id)
        into passed using x, fl_snap;
      if passed then
        perform :KEYQ_SCHEMA.out_of_range(q, format('Event %s', x));
      end if;
      raise exception 'Queue "%" has no event % (never committed, deduplicated, or already truncated by rotation); list events with keyq history.',
        q.queue_name, x
        using errcode = 'KQ031', hint = 'KEYQ:EVENT_NOT_FOUND';
    end if;
    if pg_visible_in_snapshot(e.ev_txid, fl_snap) then
      perform :KEYQ_SCHEMA.out_of_range(q, format('Event %s', x));
    end if;
    select min(t.tick_id) into end_tick_id from :KEYQ_SCHEMA.tick t
     where t.queue_id = q.queue_id and t.tick_id > fl and pg_visible_in_snapshot(e.ev_txid, t.tick_snapshot);
    if end_tick_id is null then
      end_tick_id := :KEYQ_SCHEMA.tick_now(q);
    end if;
    select max(t.tick_id) into tick_id from :KEYQ_SCHEMA.tick t
     where t.queue_id = q.queue_id and t.tick_id >= fl and t.tick_id < end_tick_id;
    last_txid := e.ev_txid;
    last_id := e.ev_id - 1;
    return;
  end if;
  raise exception 'Unknown start position %; use "latest", "earliest", a Date or an event id.', target
    using errcode = 'KQ033', hint = 'KEYQ:INVALID_INPUT';
end $$;

create function :KEYQ_SCHEMA.position_json(q :KEYQ_SCHEMA.queue, t_id bigint, end_tick bigint, after_id bigint) returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('tick', t_id::text,
           'tickTime', (select t.tick_time from :KEYQ_SCHEMA.tick t where t.queue_id = q.queue_id and t.tick_id = t_id),
           'windowEnd', end_tick::text, 'afterId', after_id::text)
$$;

-- Puts cursor slot s (null: every slot) of c at a position. An exclusive
-- consumer's work is its chunks: they are replaced by one chunk per bucket
-- for the rest of the position's window (none when it is on a tick).
create function :KEYQ_SCHEMA.place_cursors(c :KEYQ_SCHEMA.consumer, slot int, tick bigint, end_tick bigint,
                                           ltxid xid8, lid bigint) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
begin
  if c.kind = 'exclusive' then
    delete from :KEYQ_SCHEMA.chunk where consumer_id = c.consumer_id;
    if end_tick is not null then
      insert into :KEYQ_SCHEMA.chunk (consumer_id, chunk_id, start_tick, end_tick, after_txid, after_id, bucket, nbuckets)
      select c.consumer_id, nextval(':KEYQ_SCHEMA.chunk_id_seq'), tick, end_tick, ltxid, lid, b, :KEYQ_SCHEMA.consumer_buckets(c)
        from generate_series(0, :KEYQ_SCHEMA.consumer_buckets(c) - 1) b order by b;
    end if;
    update :KEYQ_SCHEMA.cursor set tick_id = tick, end_tick_id = coalesce(end_tick, tick),
           last_txid = null, last_id = null, polled_at = now()
     where consumer_id = c.consumer_id;
    return;
  end if;
  update :KEYQ_SCHEMA.cursor cu set tick_id = tick, end_tick_id = end_tick, last_txid = ltxid, last_id = lid,
         polled_at = now()
   where cu.consumer_id = c.consumer_id and (slot is null or cu.slot = slot);
end $$;

-- Moves consumer c (or one slot of an ordered consumer) to a target, in one
-- transaction. Refused (KQ032) while a batch holds what it would move. The
-- moved slots' pending retries, held events and blocked-key markers are
-- dropped: from the new position the log is the truth (a seek back reads
-- those events again, a seek forward skips them). Dead letters stay.
create function :KEYQ_SCHEMA.seek(queue text, consumer text, target jsonb, slot int default null) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('seek consumers', queue);
declare
  q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue);
  c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer);
  pos record;
  n_retry int;
  n_blocked int;
begin
  if slot is not null and (c.kind <> 'ordered' or slot < 0 or slot >= c.slots) then
    raise exception 'Consumer "%" of queue "%" has no slot % (a % consumer%); seek one slot of an ordered consumer only.',
      consumer, queue, slot, c.kind, case when c.kind = 'ordered' then format(' with slots 0..%s', c.slots - 1) else '' end
      using errcode = 'KQ033', hint = 'KEYQ:INVALID_INPUT';
  end if;
  -- Rotation and tick pruning wait (they would read the cursors being moved).
  perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('maintain', q.queue_id));
  if c.kind = 'exclusive' then
    perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('plan', c.consumer_id));
  end if;
  begin
    perform 1 from :KEYQ_SCHEMA.cursor cu where cu.consumer_id = c.consumer_id and (slot is null or cu.slot = slot)
      for update nowait;
    perform 1 from :KEYQ_SCHEMA.chunk k where k.consumer_id = c.consumer_id for update nowait;
    perform 1 from :KEYQ_SCHEMA.retry r where r.consumer_id = c.consumer_id and (slot is null or r.slot = slot)
      for update nowait;
  exception when lock_not_available then
    raise exception 'Consumer "%" of queue "%" is being read by a batch right now; seek it when no batch runs (pause it first: keyq pause % %).',
      consumer, queue, queue, consumer
      using errcode = 'KQ032', hint = 'KEYQ:CONSUMER_BUSY';
  end;
  pos := :KEYQ_SCHEMA.resolve_position(q, target);
  perform :KEYQ_SCHEMA.place_cursors(c, slot, pos.tick_id, pos.end_tick_id, pos.last_txid, pos.last_id);
  delete from :KEYQ_SCHEMA.retry r where r.consumer_id = c.consumer_id and (slot is null or r.slot = slot);
  get diagnostics n_retry = row_count;
  delete from :KEYQ_SCHEMA.blocked b where b.consumer_id = c.consumer_id and (slot is null or b.slot = slot);
  get diagnostics n_blocked = row_count;
  return jsonb_build_object('position', :KEYQ_SCHEMA.position_json(q, pos.tick_id, pos.end_tick_id, pos.last_id),
                            'slots', case when slot is null then c.slots else 1 end,
                            'retriesDropped', n_retry, 'blockedDropped', n_blocked);
end $$;

-- Key history ---------------------------------------------------------------

-- The retained events of one key from a target on (default: earliest), in
-- delivery order: by window (the first tick whose snapshot sees the event),
-- then (txid, id), so late commits keep their place as they did for the
-- consumers. Events no tick covers yet are left out (they are not history
-- yet). after: the position of the last event of the previous page
-- ("tick:txid:id"). There is no index on the key (it would cost every
-- send): the call reads the queue's retained log once.
create function :KEYQ_SCHEMA.key_events(q :KEYQ_SCHEMA.queue, key text, start jsonb, after text, max_rows int)
returns table (w bigint, e :KEYQ_SCHEMA.event)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  pos record;
  ids bigint[];
  snaps pg_snapshot[];
  s1 pg_snapshot;
  ev :KEYQ_SCHEMA.event;
  lo int;
  hi int;
  mid int;
  a_tick bigint := split_part(after, ':', 1)::bigint;
  a_txid xid8 := split_part(after, ':', 2)::xid8;
  a_id bigint := split_part(after, ':', 3)::bigint;
  found_w bigint[] := '{}';
  found_e :KEYQ_SCHEMA.event[] := '{}';
begin
  pos := :KEYQ_SCHEMA.resolve_position(q, coalesce(nullif(start, 'null'::jsonb), '{"earliest": true}'));
  select array_agg(t.tick_id order by t.tick_id), array_agg(t.tick_snapshot order by t.tick_id)
    into ids, snaps
    from :KEYQ_SCHEMA.tick t where t.queue_id = q.queue_id and t.tick_id > pos.tick_id;
  select tick_snapshot into s1 from :KEYQ_SCHEMA.tick t where t.queue_id = q.queue_id and t.tick_id = pos.tick_id;
  if ids is null then return; end if;
  for ev in execute format($q$select x.* from %I.%I x
             where x.ev_key = $1 and not pg_catalog.pg_visible_in_snapshot(x.ev_txid, $2)
               and pg_catalog.pg_visible_in_snapshot(x.ev_txid, $3) $q$, :KEYQ_SCHEMA_NAME, 'event_' || q.queue_id)
             using key, s1, snaps[cardinality(snaps)]
  loop
    -- Binary search: the first tick that sees the event (ticks are monotonic).
    lo := 1; hi := cardinality(ids);
    while lo < hi loop
      mid := (lo + hi) / 2;
      if pg_visible_in_snapshot(ev.ev_txid, snaps[mid]) then hi := mid; else lo := mid + 1; end if;
    end loop;
    -- Inside the start window, only events after the position's place.
    if pos.last_txid is not null and ids[lo] = pos.end_tick_id
       and (ev.ev_txid, ev.ev_id) <= (pos.last_txid, pos.last_id) then
      continue;
    end if;
    if after is not null and (ids[lo], ev.ev_txid, ev.ev_id) <= (a_tick, a_txid, a_id) then
      continue;
    end if;
    found_w := found_w || ids[lo];
    found_e := found_e || ev;
  end loop;
  return query select found_w[i], found_e[i] from generate_subscripts(found_w, 1) i
                order by found_w[i], (found_e[i]).ev_txid, (found_e[i]).ev_id limit max_rows;
end $$;

create function :KEYQ_SCHEMA.key_history(queue text, key text, start jsonb default null,
                                         after text default null, max_rows int default 1000) returns jsonb
language sql
set search_path = pg_catalog, pg_temp
as $$
  select :KEYQ_SCHEMA.authorize('read key history', queue);
  select coalesce(jsonb_agg(:KEYQ_SCHEMA.event_json(h.e) || jsonb_build_object(
           'position', h.w::text || ':' || (h.e).ev_txid::text || ':' || (h.e).ev_id::text)
           order by h.w, (h.e).ev_txid, (h.e).ev_id), '[]')
  from :KEYQ_SCHEMA.key_events(:KEYQ_SCHEMA.get_queue(queue), key, start, after, max_rows) h
$$;

-- Delivers one key's retained history (from a target, default earliest)
-- to one consumer again, as redeliveries in its own slot, in history order,
-- without moving any cursor: rows in the consumer's retries, due now, one
-- microsecond apart (retries go out by due time, then (txid, id)), retry
-- count 0. An event already waiting as a retry is rescheduled in place.
create function :KEYQ_SCHEMA.replay_key(queue text, consumer text, key text, start jsonb default null) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('replay keys', queue);
declare
  q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue);
  c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer);
  s int := case when c.kind = 'ordered' then :KEYQ_SCHEMA.slot_of(key, c.slots) else 0 end;
  n int;
begin
  insert into :KEYQ_SCHEMA.retry as r (consumer_id, slot, ev_id, ev_txid, ev_time, ev_type, ev_key, ev_data,
                                       retry, due_at, last_error)
  select c.consumer_id, s, (h.e).ev_id, (h.e).ev_txid, (h.e).ev_time, (h.e).ev_type, (h.e).ev_key, (h.e).ev_data,
         0, now() + make_interval(secs => h.i / 1e6), null
    from (select k.w, k.e, row_number() over (order by k.w, (k.e).ev_txid, (k.e).ev_id) - 1 as i
            from :KEYQ_SCHEMA.key_events(q, key, start, null, 2147483647) k) h
   order by h.i
  on conflict (consumer_id, ev_id) do update set due_at = excluded.due_at, retry = 0;
  get diagnostics n = row_count;
  return jsonb_build_object('replayed', n, 'slot', s);
end $$;

-- Operator controls ---------------------------------------------------------

-- Pauses (or resumes) a consumer: its batches read nothing while paused
-- (they report busy). Its cursors stay where they are, so a paused consumer
-- pins rotation like a lagging one.
create function :KEYQ_SCHEMA.set_paused(queue text, consumer text, paused boolean) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('pause and resume consumers', queue);
declare c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer); was boolean := c.paused_at is not null;
begin
  update :KEYQ_SCHEMA.consumer set paused_at = case when paused then coalesce(paused_at, now()) end
   where consumer_id = c.consumer_id;
  return jsonb_build_object('paused', paused, 'changed', was <> paused);
end $$;

-- Settles a blocked key's head now (pause policy): 'skip' drops it, 'deadLetter'
-- moves it to the dead letters; either way the key's held events go out next,
-- in order. A key that is not blocked is an error (KQ034).
create function :KEYQ_SCHEMA.settle_head(queue text, consumer text, key text, action text) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('settle blocked heads', queue);
declare
  c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer);
  b :KEYQ_SCHEMA.blocked;
  r :KEYQ_SCHEMA.retry;
begin
  select * into b from :KEYQ_SCHEMA.blocked x where x.consumer_id = c.consumer_id and x.ev_key = key;
  if not found then
    raise exception 'Key "%" is not blocked for consumer "%" of queue "%"; list blocked keys with keyq blocked % %.',
      key, consumer, queue, queue, consumer
      using errcode = 'KQ034', hint = 'KEYQ:KEY_NOT_BLOCKED';
  end if;
  begin
    select * into r from :KEYQ_SCHEMA.retry x where x.consumer_id = c.consumer_id and x.ev_id = b.head_id
      for update nowait;
  exception when lock_not_available then
    raise exception 'The head of key "%" is in a running batch of consumer "%"; try again when it ends.', key, consumer
      using errcode = 'KQ032', hint = 'KEYQ:CONSUMER_BUSY';
  end;
  if found and action = 'deadLetter' then
    insert into :KEYQ_SCHEMA.dead_letter (queue_id, consumer_id, slot, ev_id, ev_txid, ev_time, ev_type,
                                          ev_key, ev_data, attempts, error, ev_trace)
    values (c.queue_id, c.consumer_id, r.slot, r.ev_id, r.ev_txid, r.ev_time, r.ev_type, r.ev_key,
            r.ev_data, r.retry, coalesce(r.last_error, '{}'::jsonb) || '{"settledBy": "operator"}', r.ev_trace);
  end if;
  delete from :KEYQ_SCHEMA.retry x where x.consumer_id = c.consumer_id and x.ev_id = b.head_id;
  perform :KEYQ_SCHEMA.release_key(c, b.slot, key);
  return jsonb_build_object('key', key, 'slot', b.slot, 'headId', b.head_id::text, 'action', action);
end $$;
