-- keyq engine, part 2: failures. Retries belong to one consumer (and slot),
-- never to the queue, so a fan-out queue retries only where it failed. Rows
-- copy the event, so a pending retry never pins rotation. The happy path
-- writes nothing here: rows appear only when a handler fails.

-- Retry policy of a consumer: its own settings override the queue's.
create function :KEYQ_SCHEMA.retry_policy(c :KEYQ_SCHEMA.consumer,
  out max_retries int, out base float8, out cap float8)
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select coalesce((c.settings->>'maxRetries')::int, q.max_retries),
         coalesce((c.settings->>'retryBase')::float8, extract(epoch from q.retry_base)::float8),
         coalesce((c.settings->>'retryCap')::float8, extract(epoch from q.retry_cap)::float8)
  from :KEYQ_SCHEMA.queue q where q.queue_id = c.queue_id
$$;

-- Exponential backoff with "equal jitter": half of the delay is fixed and half
-- random, so delays never shrink from one failure to the next.
create function :KEYQ_SCHEMA.backoff(base float8, cap float8, failures int) returns interval
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
begin
  return make_interval(secs => least(cap, base * 2 ^ least(failures - 1, 60)) * (0.5 + random() / 2));
end $$;

-- Due retries of one consumer slot, oldest due first, then original order;
-- row-locked for the batch (other workers skip them).
create function :KEYQ_SCHEMA.take_retries(cid int, slot int, max_rows int) returns jsonb
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  return (
    select coalesce(jsonb_agg(jsonb_build_object(
             'id', r.ev_id::text, 'txid', r.ev_txid::text, 'type', r.ev_type, 'key', r.ev_key,
             'payload', r.ev_data, 'time', r.ev_time, 'retry', r.retry, 'redelivered', true,
             'trace', r.ev_trace)
             order by r.due_at, r.ev_txid, r.ev_id), '[]')
    from (select * from :KEYQ_SCHEMA.retry
           where consumer_id = cid and slot = take_retries.slot and due_at <= clock_timestamp()
           order by due_at, ev_txid, ev_id
           limit max_rows
           for update skip locked) r);
end $$;

-- The steps every window read shares (window_take, receive_plain_rows,
-- window_lines). window_open: cursor cur with its window open, up to the
-- newest tick when none was; end_tick_id stays null when no tick came since
-- (the cursor's polled_at then records the look).
create function :KEYQ_SCHEMA.window_open(c :KEYQ_SCHEMA.consumer, cur :KEYQ_SCHEMA.cursor) returns :KEYQ_SCHEMA.cursor
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  if cur.end_tick_id is null then
    select max(t.tick_id) into cur.end_tick_id from :KEYQ_SCHEMA.tick t
     where t.queue_id = c.queue_id and t.tick_id > cur.tick_id;
    if cur.end_tick_id is null then
      update :KEYQ_SCHEMA.cursor u set polled_at = now() where u.consumer_id = c.consumer_id and u.slot = cur.slot;
    end if;
  end if;
  return cur;
end $$;

-- A window read to its end closes at its end tick, and the next one opens
-- up to the newest tick (end_tick_id null when there is none yet).
create function :KEYQ_SCHEMA.window_next(c :KEYQ_SCHEMA.consumer, cur :KEYQ_SCHEMA.cursor) returns :KEYQ_SCHEMA.cursor
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
begin
  cur.tick_id := cur.end_tick_id;
  cur.end_tick_id := null;
  cur.last_txid := null;
  cur.last_id := null;
  select max(t.tick_id) into cur.end_tick_id from :KEYQ_SCHEMA.tick t
   where t.queue_id = c.queue_id and t.tick_id > cur.tick_id;
  return cur;
end $$;

-- The cursor's new window and position, written in the batch's transaction.
create function :KEYQ_SCHEMA.window_save(c :KEYQ_SCHEMA.consumer, cur :KEYQ_SCHEMA.cursor) returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
  update :KEYQ_SCHEMA.cursor u set tick_id = cur.tick_id, end_tick_id = cur.end_tick_id, last_txid = cur.last_txid,
         last_id = cur.last_id, polled_at = now(), batch_at = now()
   where u.consumer_id = c.consumer_id and u.slot = cur.slot;
$$;

-- The next events of cursor (c, s) after its durable position, at most max_rows
-- (only the slot's own events for an ordered consumer), in (txid, id) order;
-- opens a window up to the newest tick when none is open and moves the
-- position (or closes the window) in the caller's transaction. A window
-- read to its end with room left goes on into the next one (up to the
-- newest tick, in log order): a batch that is not full has read everything
-- ticked, so a run may end on it without another look (an open window
-- ends at the tick it was opened with, which may be older than the newest).
-- A window read to exactly the room left stays open at its last event:
-- the next read finds out whether it holds more, and closes it when it
-- does not (reading one more row to know at once cost the wire reads a
-- tuplestore). window_lines reads the same windows as rows for a reply.
create function :KEYQ_SCHEMA.window_take(c :KEYQ_SCHEMA.consumer, cur :KEYQ_SCHEMA.cursor, max_rows int)
returns :KEYQ_SCHEMA.event[]
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  evs :KEYQ_SCHEMA.event[] := '{}';
  s1 pg_snapshot;
  s2 pg_snapshot;
  part :KEYQ_SCHEMA.event[];
  got int;
  room int := max_rows;
  a_txid xid8;
  a_id bigint;
begin
  if max_rows <= 0 then return evs; end if;
  cur := :KEYQ_SCHEMA.window_open(c, cur);
  if cur.end_tick_id is null then return evs; end if;
  select tick_snapshot into s1 from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = cur.tick_id;
  loop
    select tick_snapshot into s2 from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = cur.end_tick_id;
    a_txid := coalesce(cur.last_txid, '0'::xid8);
    a_id := coalesce(cur.last_id, 0);
    if c.kind = 'ordered' then
      part := :KEYQ_SCHEMA.window_slot_array(c.queue_id, s1, s2, a_txid, a_id, room, c.slots, cur.slot);
    else
      part := :KEYQ_SCHEMA.window_array(c.queue_id, s1, s2, a_txid, a_id, room);
    end if;
    got := coalesce(cardinality(part), 0);
    if got > 0 then
      -- Most batches read one window: its array is the batch's, uncopied.
      evs := case when cardinality(evs) = 0 then part else evs || part end;
      cur.last_txid := part[got].ev_txid;
      cur.last_id := part[got].ev_id;
    end if;
    -- Full: the window stays open at the last event taken.
    exit when got = room;
    -- Read to its end: the window closes at its end tick.
    room := room - got;
    cur := :KEYQ_SCHEMA.window_next(c, cur);
    exit when cur.end_tick_id is null;
    s1 := s2;
  end loop;
  perform :KEYQ_SCHEMA.window_save(c, cur);
  return evs;
end $$;

-- window_take as the engine's JSON event objects (Tier B's receive).
create function :KEYQ_SCHEMA.read_window(c :KEYQ_SCHEMA.consumer, cur :KEYQ_SCHEMA.cursor, max_rows int) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
declare evs :KEYQ_SCHEMA.event[] := :KEYQ_SCHEMA.window_take(c, cur, max_rows);
begin
  return coalesce((select jsonb_agg(:KEYQ_SCHEMA.event_json(evs[i]) order by i)
                     from generate_subscripts(evs, 1) i), '[]');
end $$;

-- One batch of a plain consumer: lock its cursor (skip when another batch
-- holds it), take due retries first, then fill up from the window. As JSON
-- event objects for SQL callers; the client reads receive_plain below.
create function :KEYQ_SCHEMA.receive(queue text, consumer text, max_events int) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('consume', queue, consumer);
declare
  c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer);
  cur :KEYQ_SCHEMA.cursor;
  retries jsonb;
begin
  if c.kind <> 'plain' then
    raise exception 'Consumer "%" of queue "%" is a % consumer; read it with the matching API.', consumer, queue, c.kind
      using errcode = 'KQ003', hint = 'KEYQ:CONSUMER_KIND_MISMATCH';
  end if;
  if c.paused_at is not null then  -- paused by an operator (07_positions.sql)
    return jsonb_build_object('busy', true, 'events', '[]'::jsonb);
  end if;
  select * into cur from :KEYQ_SCHEMA.cursor where consumer_id = c.consumer_id and slot = 0
    for update skip locked;
  if not found then
    return jsonb_build_object('busy', true, 'events', '[]'::jsonb);
  end if;
  retries := :KEYQ_SCHEMA.take_retries(c.consumer_id, 0, max_events);
  return jsonb_build_object('busy', false, 'events',
    retries || :KEYQ_SCHEMA.read_window(c, cur, max_events - jsonb_array_length(retries)));
end $$;

-- One batch of a plain consumer in its row form (src/engine/wire.ts): a
-- first row {"busy": b, "retries": [event objects]}, then a row per event
-- of the window, [id, txid, type, key, time, trace] and the payload's JSON
-- text after a newline. The window's rows go to the reply as the statement
-- reads them: no text of the whole batch is built and copied on the way
-- (one 1,000-event document was copied five times, each copy into fresh
-- pages: half the backend's time went to memmove and page faults).
-- When another batch holds the cursor, waits for it up to wait_ms (its
-- commit hands the cursor over, so a second worker reads the next batch at
-- once instead of polling), then fails with 55P03 (the client: busy). Order is unchanged: a batch
-- starts only after the previous one committed.
-- The windows are read as window_take reads them (see there), up to the
-- newest tick, and window_lines reads a Tier B slot's: the read records the
-- position of each row it returns (a transaction-local setting,
-- keyq.read_at), so a window read to the room left stays open at its last
-- event without reading the rows again. The loop is written out here, not
-- called from window_lines: a set-returning function's rows are copied
-- into its caller's result once more (a tenth of a 1,000-event batch).
create function :KEYQ_SCHEMA.receive_plain_rows(queue text, consumer text, max_events int, wait_ms int default 0)
returns setof text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('consume', queue, consumer);
declare
  c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer);
  cur :KEYQ_SCHEMA.cursor;
  retries jsonb;
  prev text;
  s1 pg_snapshot;
  s2 pg_snapshot;
  room int;
  got int;
  at text[];
  -- The read's plan settings (window_array's), for the read only: the
  -- batch's own statements keep the caller's.
  saved text[];
begin
  if c.kind <> 'plain' then
    raise exception 'Consumer "%" of queue "%" is a % consumer; read it with the matching API.', consumer, queue, c.kind
      using errcode = 'KQ003', hint = 'KEYQ:CONSUMER_KIND_MISMATCH';
  end if;
  if c.paused_at is not null then  -- paused by an operator (07_positions.sql)
    return next '{"busy":true,"retries":[]}';
    return;
  end if;
  select * into cur from :KEYQ_SCHEMA.cursor where consumer_id = c.consumer_id and slot = 0
    for update skip locked;
  if not found and wait_ms > 0 then
    -- READ COMMITTED: the wait ends with the holder's committed row version.
    -- No exception block: a row lock taken in its subtransaction, then this
    -- transaction's update of the row, cost a MultiXact per waited batch.
    -- A wait past wait_ms fails the statement (55P03), which the client
    -- reads as busy.
    prev := current_setting('lock_timeout');
    perform set_config('lock_timeout', wait_ms || 'ms', true);
    select * into cur from :KEYQ_SCHEMA.cursor where consumer_id = c.consumer_id and slot = 0 for update;
    perform set_config('lock_timeout', prev, true);
  end if;
  if cur.consumer_id is null then
    return next '{"busy":true,"retries":[]}';
    return;
  end if;
  retries := :KEYQ_SCHEMA.take_retries(c.consumer_id, 0, max_events);
  return next '{"busy":false,"retries":' || retries::text || '}';
  room := max_events - jsonb_array_length(retries);
  if room <= 0 then return; end if;
  cur := :KEYQ_SCHEMA.window_open(c, cur);
  if cur.end_tick_id is null then return; end if;
  saved := array[current_setting('enable_sort'), current_setting('enable_seqscan'), current_setting('jit'),
                 current_setting('plan_cache_mode')];
  perform set_config('enable_sort', 'off', true), set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true),
          set_config('plan_cache_mode', 'force_generic_plan', true);
  select tick_snapshot into s1 from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = cur.tick_id;
  loop
    select tick_snapshot into s2 from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = cur.end_tick_id;
    return query execute :KEYQ_SCHEMA.prepared_call(
      :KEYQ_SCHEMA.lines_sql(:KEYQ_SCHEMA.window_range_sql(c.queue_id)),
      'pg_snapshot, pg_snapshot, xid8, bigint, int',
      array[s1::text, s2::text, coalesce(cur.last_txid, '0'::xid8)::text, coalesce(cur.last_id, 0)::text, room::text]);
    get diagnostics got = row_count;
    if got = room then
      -- Full: the window stays open at the last event taken.
      at := string_to_array(current_setting('keyq.read_at'), ' ');
      cur.last_txid := at[1]::xid8;
      cur.last_id := at[2]::bigint;
      exit;
    end if;
    -- Read to its end: the window closes at its end tick.
    room := room - got;
    cur := :KEYQ_SCHEMA.window_next(c, cur);
    exit when cur.end_tick_id is null;
    s1 := s2;
  end loop;
  perform set_config('enable_sort', saved[1], true), set_config('enable_seqscan', saved[2], true), set_config('jit', saved[3], true),
          set_config('plan_cache_mode', saved[4], true);
  perform :KEYQ_SCHEMA.window_save(c, cur);
end $$;

-- An event line of receive_plain_rows and window_lines: the row r's head,
-- then its payload.
-- Neither json_build_array nor jsonb's output writes a raw newline, so the
-- client splits a line at its first one without parsing the payload.
create function :KEYQ_SCHEMA.line_select() returns text
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  return $s$pg_catalog.json_build_array(r.ev_id::text, r.ev_txid::text, r.ev_type, r.ev_key, r.ev_time, r.ev_trace)::text
            || E'\n' || r.ev_data::text$s$;
end $$;

-- The statement that returns the rows r of range_sql as lines, each
-- recording its position as it goes out (a transaction-local setting,
-- keyq.read_at, read back when the window was read to the room left).
create function :KEYQ_SCHEMA.lines_sql(range_sql text) returns text
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  return format('select %s from (%s) r where pg_catalog.set_config(''keyq.read_at'', r.ev_txid::text || '' '' || r.ev_id::text, true) is not null',
                :KEYQ_SCHEMA.line_select(), range_sql);
end $$;

-- The statement that returns the events of array $1 as lines, in order (a
-- Tier B slot read as an array: stragglers of its own, or blocked keys).
create function :KEYQ_SCHEMA.array_lines_sql() returns text
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  return format('select %s from unnest($1) with ordinality as r(queue_id, ev_table, ev_id, ev_txid, ev_time, ev_type, ev_key, ev_data, ev_trace, i) order by r.i',
                :KEYQ_SCHEMA.line_select());
end $$;

-- receive_plain_rows' batch as one text, the form clients of earlier function
-- sets read (a process of an older build during a rolling deploy):
-- {"busy": b, "retries": [...], "rows": [row heads]} followed by each
-- payload after a newline.
create function :KEYQ_SCHEMA.receive_plain(queue text, consumer text, max_events int, wait_ms int default 0)
returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('consume', queue, consumer);
declare head text; heads text; payloads text;
begin
  select min(l) filter (where i = 1),
         string_agg(split_part(l, E'\n', 1), ',' order by i) filter (where i > 1),
         string_agg(E'\n' || substr(l, strpos(l, E'\n') + 1), '' order by i) filter (where i > 1)
    into head, heads, payloads
    from :KEYQ_SCHEMA.receive_plain_rows(queue, consumer, max_events, wait_ms) with ordinality as t(l, i);
  return left(head, -1) || ',"rows":[' || coalesce(heads, '') || ']}' || coalesce(payloads, '');
end $$;

-- Parks events (JSON with id, txid) of consumer slot s in the retry rows
-- until `due`, without spending a retry: existing retry rows move, events
-- from the log are copied (a null slot: each event's own, slot_of its key). Tier A defers a contended key's event a moment;
-- Tier B's pause holds a blocked key's events until 'infinity' (released later).
create function :KEYQ_SCHEMA.park_events(c :KEYQ_SCHEMA.consumer, slot int, events jsonb, due timestamptz) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare d jsonb; e :KEYQ_SCHEMA.event; n int := 0;
begin
  for d in select x from jsonb_array_elements(coalesce(events, '[]')) x loop
    update :KEYQ_SCHEMA.retry set due_at = due
     where consumer_id = c.consumer_id and ev_id = (d->>'id')::bigint;
    if not found then
      e := :KEYQ_SCHEMA.event_row(c.queue_id, (d->>'txid')::xid8, (d->>'id')::bigint);
      if e.ev_id is null then continue; end if;
      insert into :KEYQ_SCHEMA.retry (consumer_id, slot, ev_id, ev_txid, ev_time, ev_type, ev_key, ev_data,
                                      retry, due_at, last_error, ev_trace)
      values (c.consumer_id, coalesce(slot, :KEYQ_SCHEMA.slot_of(e.ev_key, c.slots)), e.ev_id, e.ev_txid, e.ev_time, e.ev_type, e.ev_key, e.ev_data, 0, due, null, e.ev_trace)
      on conflict (consumer_id, ev_id) do nothing;
    end if;
    n := n + 1;
  end loop;
  return n;
end $$;

-- Records a batch's outcome for consumer slot `slot`: delivered retries that
-- succeeded are deleted; each failure is scheduled again with backoff or,
-- past max_retries, moved to the dead letters with its error.
-- outcome: {"retried": ["id", …], "failed": [{"id", "txid", "error"}, …],
--           "deferred": [{"id", "txid"}, …], "deferDelay": seconds,
--           "pause": bool, "held": [{"id", "txid"}, …], "released": [{"id", "txid"}, …]}
-- With pause, a failed keyed event blocks its key (it is the head) and an
-- acked or dead-lettered head releases the key's held events. A null slot:
-- a Tier B batch that read several slots; each event's slot is slot_of its
-- key, as the slot that delivered it.
create function :KEYQ_SCHEMA.ack(queue text, consumer text, slot int, outcome jsonb) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('consume', queue, consumer);
declare
  c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer);
  p record;
  f jsonb;
  r :KEYQ_SCHEMA.retry;
  e :KEYQ_SCHEMA.event;
  failed_ids bigint[];
  n_retry int := 0;
  n_dead int := 0;
  pause boolean := coalesce((outcome->>'pause')::boolean, false);
  succeeded bigint[];
begin
  p := :KEYQ_SCHEMA.retry_policy(c);
  select coalesce(array_agg((x->>'id')::bigint), '{}') into failed_ids
    from jsonb_array_elements(coalesce(outcome->'failed', '[]')) x;
  with gone as (
    delete from :KEYQ_SCHEMA.retry
     where consumer_id = c.consumer_id and (ack.slot is null or retry.slot = ack.slot)
       and ev_id in (select (jsonb_array_elements_text(coalesce(outcome->'retried', '[]')))::bigint)
       and ev_id <> all (failed_ids)
    returning ev_id
  )
  select coalesce(array_agg(ev_id), '{}') into succeeded from gone;
  if pause then
    -- An acked head releases its key's held events.
    perform :KEYQ_SCHEMA.release_heads(c, slot, succeeded);
  end if;
  -- Held first: a head dead-lettered below must find its key's held events.
  perform :KEYQ_SCHEMA.park_events(c, slot, outcome->'held', 'infinity');
  -- Released: read but not started (budget spent, worker stopping); due now,
  -- so they come first next time, in (txid, id) order, no retry spent.
  perform :KEYQ_SCHEMA.park_events(c, slot, outcome->'released', clock_timestamp());
  for f in select x from jsonb_array_elements(coalesce(outcome->'failed', '[]')) x loop
    select * into r from :KEYQ_SCHEMA.retry where consumer_id = c.consumer_id and ev_id = (f->>'id')::bigint;
    if not found then
      e := :KEYQ_SCHEMA.event_row(c.queue_id, (f->>'txid')::xid8, (f->>'id')::bigint);
      if e.ev_id is null then continue; end if;  -- rotated away meanwhile: nothing left to retry
      r := row(c.consumer_id, coalesce(slot, :KEYQ_SCHEMA.slot_of(e.ev_key, c.slots)), e.ev_id, e.ev_txid, e.ev_time, e.ev_type, e.ev_key, e.ev_data, 0, now(), null, e.ev_trace);
    end if;
    if r.retry + 1 > p.max_retries then
      insert into :KEYQ_SCHEMA.dead_letter (queue_id, consumer_id, slot, ev_id, ev_txid, ev_time, ev_type,
                                            ev_key, ev_data, attempts, error, ev_trace)
      values (c.queue_id, c.consumer_id, r.slot, r.ev_id, r.ev_txid, r.ev_time, r.ev_type, r.ev_key,
              r.ev_data, r.retry + 1, f->'error', r.ev_trace);
      delete from :KEYQ_SCHEMA.retry where consumer_id = c.consumer_id and ev_id = r.ev_id;
      n_dead := n_dead + 1;
      if pause and r.ev_key is not null then
        perform :KEYQ_SCHEMA.release_key(c, r.slot, r.ev_key);
      end if;
    else
      insert into :KEYQ_SCHEMA.retry as t
      values (c.consumer_id, r.slot, r.ev_id, r.ev_txid, r.ev_time, r.ev_type, r.ev_key, r.ev_data,
              r.retry + 1, clock_timestamp() + :KEYQ_SCHEMA.backoff(p.base, p.cap, r.retry + 1), f->'error', r.ev_trace)
      on conflict (consumer_id, ev_id) do update
        set retry = excluded.retry, due_at = excluded.due_at, last_error = excluded.last_error;
      n_retry := n_retry + 1;
      if pause and r.ev_key is not null then
        perform :KEYQ_SCHEMA.block_key(c, r.slot, r.ev_key, r.ev_id);
      end if;
    end if;
  end loop;
  return jsonb_build_object('retried', n_retry, 'deadLettered', n_dead,
    'deferred', :KEYQ_SCHEMA.park_events(c, slot, outcome->'deferred',
      clock_timestamp() + make_interval(secs => coalesce((outcome->>'deferDelay')::float8, 1))));
end $$;

-- Dead letters -------------------------------------------------------------

-- A filter naming a queue or consumer that does not exist is an error, not
-- an empty answer (a typo would otherwise read as "no dead letters").
create function :KEYQ_SCHEMA.dlq_check(f jsonb) returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
  if f->>'queue' is not null and f->>'consumer' is not null then
    perform :KEYQ_SCHEMA.get_consumer(f->>'queue', f->>'consumer');
  elsif f->>'queue' is not null then
    perform :KEYQ_SCHEMA.get_queue(f->>'queue');
  elsif f->>'consumer' is not null
        and not exists (select 1 from :KEYQ_SCHEMA.consumer where consumer_name = f->>'consumer') then
    raise exception 'No queue has a consumer named "%"; check the name with status().', f->>'consumer'
      using errcode = 'KQ002', hint = 'KEYQ:CONSUMER_NOT_FOUND';
  end if;
end $$;

-- Filters: queue, consumer, key, olderThan / newerThan (seconds), afterId.
create function :KEYQ_SCHEMA.dlq_where(d :KEYQ_SCHEMA.dead_letter, f jsonb) returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select (f->>'queue' is null or d.queue_id = (select queue_id from :KEYQ_SCHEMA.queue where queue_name = f->>'queue'))
     and (f->>'consumer' is null or d.consumer_id in (select consumer_id from :KEYQ_SCHEMA.consumer
                                                       where consumer_name = f->>'consumer'))
     and (f->>'key' is null or d.ev_key = f->>'key')
     and (f->>'olderThan' is null or d.dead_at < now() - make_interval(secs => (f->>'olderThan')::float8))
     and (f->>'newerThan' is null or d.dead_at >= now() - make_interval(secs => (f->>'newerThan')::float8))
     and (f->>'afterId' is null or d.dl_id > (f->>'afterId')::bigint)
$$;

create function :KEYQ_SCHEMA.dlq_list(filter jsonb, max_rows int) returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select :KEYQ_SCHEMA.authorize('consume', filter->>'queue', filter->>'consumer');
  select :KEYQ_SCHEMA.dlq_check(filter);
  select coalesce(jsonb_agg(jsonb_build_object(
           'id', d.dl_id::text, 'queue', q.queue_name, 'consumer', c.consumer_name, 'slot', d.slot,
           'eventId', d.ev_id::text, 'type', d.ev_type, 'key', d.ev_key, 'payload', d.ev_data,
           'time', d.ev_time, 'attempts', d.attempts, 'error', d.error, 'deadAt', d.dead_at, 'trace', d.ev_trace)
           order by d.dl_id), '[]')
  from (select * from :KEYQ_SCHEMA.dead_letter x where :KEYQ_SCHEMA.dlq_where(x, filter)
         order by x.dl_id limit max_rows) d
  join :KEYQ_SCHEMA.queue q using (queue_id)
  join :KEYQ_SCHEMA.consumer c using (consumer_id)
$$;

create function :KEYQ_SCHEMA.dlq_count(filter jsonb) returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select :KEYQ_SCHEMA.authorize('consume', filter->>'queue', filter->>'consumer');
  select :KEYQ_SCHEMA.dlq_check(filter);
  select to_jsonb(count(*)) from :KEYQ_SCHEMA.dead_letter x where :KEYQ_SCHEMA.dlq_where(x, filter)
$$;

-- Moves dead letters back to their own consumer's retries, due now, with a
-- fresh retry budget. Same due time → delivered in original (txid, id) order.
-- The trace context goes back with them: the replayed delivery links to the
-- producer that sent the event.
create function :KEYQ_SCHEMA.dlq_requeue(ids bigint[]) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare n int;
begin
  with moved as (
    delete from :KEYQ_SCHEMA.dead_letter where dl_id = any (ids) returning *
  )
  insert into :KEYQ_SCHEMA.retry (consumer_id, slot, ev_id, ev_txid, ev_time, ev_type, ev_key, ev_data,
                                  retry, due_at, last_error, ev_trace)
  select consumer_id, slot, ev_id, ev_txid, ev_time, ev_type, ev_key, ev_data, 0, now(), error, ev_trace
    from moved
  on conflict (consumer_id, ev_id) do update set due_at = excluded.due_at, retry = 0;
  get diagnostics n = row_count;
  return n;
end $$;

-- Replays the given dead letters; all must exist, or nothing changes.
create function :KEYQ_SCHEMA.dlq_replay(ids jsonb) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('replay dead letters');
declare wanted bigint[]; missing bigint;
begin
  select coalesce(array_agg(x::bigint), '{}') into wanted from jsonb_array_elements_text(ids) x;
  select w into missing from unnest(wanted) w
   where not exists (select 1 from :KEYQ_SCHEMA.dead_letter where dl_id = w) limit 1;
  if missing is not null then
    raise exception 'Dead letter % does not exist (already replayed or purged?); list them with dlq.list().', missing
      using errcode = 'KQ005', hint = 'KEYQ:DEAD_LETTER_NOT_FOUND';
  end if;
  return to_jsonb(:KEYQ_SCHEMA.dlq_requeue(wanted));
end $$;

-- Replays the dead letters matching a filter (e.g. one consumer's key K).
create function :KEYQ_SCHEMA.dlq_replay_where(filter jsonb) returns jsonb
language sql
set search_path = pg_catalog, pg_temp
as $$
  select :KEYQ_SCHEMA.authorize('replay dead letters');
  select :KEYQ_SCHEMA.dlq_check(filter);
  select to_jsonb(:KEYQ_SCHEMA.dlq_requeue(array(
    select dl_id from :KEYQ_SCHEMA.dead_letter x where :KEYQ_SCHEMA.dlq_where(x, filter))))
$$;

create function :KEYQ_SCHEMA.dlq_purge(filter jsonb) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('purge dead letters');
declare n int;
begin
  perform :KEYQ_SCHEMA.dlq_check(filter);
  delete from :KEYQ_SCHEMA.dead_letter x where :KEYQ_SCHEMA.dlq_where(x, filter);
  get diagnostics n = row_count;
  return to_jsonb(n);
end $$;

-- Expired dedup keys of one queue, at most max_rows per call (bounded work).
create function :KEYQ_SCHEMA.dedup_gc(qid int, max_rows int) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare n int;
begin
  delete from :KEYQ_SCHEMA.dedup
   where ctid = any (array(select ctid from :KEYQ_SCHEMA.dedup
                            where queue_id = qid and expires_at <= now() limit max_rows));
  get diagnostics n = row_count;
  return n;
end $$;

-- Rotation when due, tick pruning and one chunk of dedup GC for one queue;
-- skips when another maintainer holds the queue.
create function :KEYQ_SCHEMA.maintain(queue text, force_rotate boolean default false) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize(case when force_rotate then 'force rotation' else 'housekeep' end, queue);
declare q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue); r jsonb;
begin
  if not pg_try_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('maintain', q.queue_id)) then
    return jsonb_build_object('queue', queue, 'skipped', true);
  end if;
  r := :KEYQ_SCHEMA.rotate(queue, force_rotate);
  return jsonb_build_object('queue', queue, 'skipped', false, 'rotation', r,
                            'ticksPruned', :KEYQ_SCHEMA.prune_ticks(q.queue_id),
                            'dedupExpired', :KEYQ_SCHEMA.dedup_gc(q.queue_id, 5000));
end $$;
