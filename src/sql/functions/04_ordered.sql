-- keyq engine, part 4: Tier B, the ordered consumer. N fixed slots per
-- (queue, consumer); key K always maps to slot_of(K, N); each slot is its own
-- cursor, read by one worker at a time, FIFO within a key.
--
-- Read amplification: an expression index on (slot_of(ev_key, N), ev_txid,
-- ev_id) is built on the queue's log for each persisted N, so a slot reads
-- its own rows only instead of the whole stream.
--
-- slot_of(key, n) is not here: indexes depend on it, so it is frozen in
-- src/sql/migrations/007_slot_of_qualified.sql (a change is a new migration).

-- Refuses a handle whose N is not the consumer's persisted N: it would read
-- slots 0..slot_count-1 only, stalling the other slots and pinning rotation.
create function :KEYQ_SCHEMA.check_slots(c :KEYQ_SCHEMA.consumer, queue text, slot_count int) returns void
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
  if slot_count is not null and c.slots <> slot_count then
    raise exception 'Consumer "%" of queue "%" has % slots, persisted when it was created, not %; pass slots: % or use another consumer name.', c.consumer_name, queue, c.slots, slot_count, c.slots
      using errcode = 'KQ004', hint = 'KEYQ:SLOT_COUNT_MISMATCH';
  end if;
end $$;

-- slotOf() of a handle: slot_of(key, slot_count), refused when the consumer
-- exists with another N (before it exists, slot_count is the only N there is).
create function :KEYQ_SCHEMA.consumer_slot_of(queue text, consumer text, key text, slot_count int) returns jsonb
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('consume', queue, consumer);
declare c :KEYQ_SCHEMA.consumer;
begin
  select k.* into c from :KEYQ_SCHEMA.consumer k join :KEYQ_SCHEMA.queue q using (queue_id)
   where q.queue_name = queue and k.consumer_name = consumer;
  if found then
    perform :KEYQ_SCHEMA.check_slots(c, queue, slot_count);
  end if;
  return to_jsonb(:KEYQ_SCHEMA.slot_of(key, slot_count));
end $$;

-- The slot index for N, one per ring table of the queue (a partitioned
-- parent cannot be indexed concurrently, and reads only use the leaves').
-- Never blocks producers: a ring table nobody is writing to (lock NOWAIT)
-- and that is small is indexed in place, in milliseconds; any other is left
-- to the client, which runs the returned CREATE INDEX CONCURRENTLY
-- statements outside a transaction and subscribes again. An INVALID index
-- (a failed concurrent build) is dropped and rebuilt, unless a build still
-- holds its table (then the client waits). inline builds everything here
-- (for a server that cannot build concurrently; PGlite has one connection).
-- Returns null when every ring table has a valid index.
create function :KEYQ_SCHEMA.ensure_slot_index(qid int, slot_count int, inline boolean default false) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  q :KEYQ_SCHEMA.queue;
  tbl text;
  idx text;
  valid boolean;
  build text[] := '{}';
  waiting boolean := false;
  ddl text;
begin
  select * into q from :KEYQ_SCHEMA.queue where queue_id = qid;
  for i in 0 .. q.ntables - 1 loop
    tbl := 'event_' || qid || '_' || i;
    idx := tbl || '_slots' || slot_count;
    ddl := format('create index %%s if not exists %I on %I.%I (%I.slot_of(ev_key, %s), ev_txid, ev_id)',
                  idx, :KEYQ_SCHEMA_NAME, tbl, :KEYQ_SCHEMA_NAME, slot_count);
    select x.indisvalid into valid
      from pg_index x join pg_class c on c.oid = x.indexrelid
     where c.relname = idx and c.relnamespace = :KEYQ_SCHEMA_NAME::regnamespace;
    if valid then continue; end if;
    if valid is not null then
      -- INVALID: a concurrent build in progress holds SHARE UPDATE EXCLUSIVE.
      begin
        execute format('lock table %I.%I in share update exclusive mode nowait', :KEYQ_SCHEMA_NAME, tbl);
      exception when lock_not_available then
        waiting := true;
        continue;
      end;
      if not inline then
        build := build || format('drop index concurrently if exists %I.%I', :KEYQ_SCHEMA_NAME, idx)
                       || format(ddl, 'concurrently');
        continue;
      end if;
      execute format('drop index %I.%I', :KEYQ_SCHEMA_NAME, idx);
    end if;
    if not inline then
      begin
        execute format('lock table %I.%I in share mode nowait', :KEYQ_SCHEMA_NAME, tbl);
      exception when lock_not_available then
        build := build || format(ddl, 'concurrently');
        continue;
      end;
      if pg_relation_size(format('%I.%I', :KEYQ_SCHEMA_NAME, tbl)) > 1048576 then
        build := build || format(ddl, 'concurrently');
        continue;
      end if;
    end if;
    execute format(ddl, '');
  end loop;
  if cardinality(build) = 0 and not waiting then return null; end if;
  return jsonb_build_object('build', to_jsonb(build), 'wait', waiting);
end $$;

-- The range branch of a slot's window read (window_slot_array,
-- window_slot_wire): the slot's rows from ($7 = slot, $8, $9) up to xmax of
-- $3, visible in $3, at most $6, in (txid, id) order. Parameters $1 to $9
-- as window_slot_array's range_types, so both statements take one list.
create function :KEYQ_SCHEMA.slot_range_sql(qid int, slot_count int) returns text
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  return format($q$
      select e.* from %1$I.%3$I e
        where (%1$I.slot_of(e.ev_key, %2$s), e.ev_txid, e.ev_id) > ($7, $8, $9)
          and (%1$I.slot_of(e.ev_key, %2$s), e.ev_txid, e.ev_id) < ($7, pg_catalog.pg_snapshot_xmax($3), 0::bigint)
          and pg_catalog.pg_visible_in_snapshot(e.ev_txid, $3)
        order by %1$I.slot_of(e.ev_key, %2$s), e.ev_txid, e.ev_id limit $6 $q$, :KEYQ_SCHEMA_NAME, slot_count::int, 'event_' || qid);
end $$;

-- The straggler branch of a slot's window read (window_slot_array,
-- window_slot_wire): the slot's rows of the transactions $7 after ($2, $3),
-- at most $5, in (txid, id) order; parameters as window_slot_array's. The
-- slot test is written "+ 0" to keep the branch off the slot index.
create function :KEYQ_SCHEMA.slot_late_sql(qid int, slot_count int) returns text
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  return format($q$
      select e.* from %1$I.%3$I e
        where e.ev_txid = any ($7) and %1$I.slot_of(e.ev_key, %2$s) operator(pg_catalog.+) 0 = $4
          and (e.ev_txid, e.ev_id) > ($2, $3)
        order by e.ev_txid, e.ev_id limit $5 $q$, :KEYQ_SCHEMA_NAME, slot_count::int, 'event_' || qid);
end $$;

-- window_array restricted to slot `slot` of slot_count, reading only the slot's rows:
-- the range is written as row comparisons led by the slot expression, which
-- only the slot index can serve, and sorting is off so the plan is an
-- ordered index scan that stops at the limit. Neither depends on row
-- estimates (xid8 ranges are estimated badly, and fresh tables have no
-- statistics). N is spliced as an integer literal so the index matches.
-- The straggler and range branches are read by separate statements and
-- merged in memory (at most 2 * max_rows rows): one statement ordering their
-- union by (txid, id) needs a Sort that enable_sort = off prices at 1e10,
-- which made the server JIT-compile every call. jit is off as a backstop.
create function :KEYQ_SCHEMA.window_slot_array(
  qid int, s1 pg_snapshot, s2 pg_snapshot, a_txid xid8, a_id bigint, max_rows int, slot_count int, slot int
) returns :KEYQ_SCHEMA.event[]
language plpgsql volatile
set search_path = pg_catalog, pg_temp
set enable_sort = off
set enable_seqscan = off
set jit = off
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_variable
declare
  lo_txid xid8 := a_txid;
  lo_id bigint := a_id;
  -- Transactions in progress at s1 that finished by s2. On a busy database
  -- most are unrelated to this queue: their branch must probe the txid index
  -- (nothing found, nothing read), never walk the slot index filtering on the
  -- list, so its slot test is written "+ 0" to keep it off the slot index.
  -- With no stragglers the branch is left out.
  strag xid8[] := array(select x from pg_snapshot_xip(s1) x where pg_visible_in_snapshot(x, s2));
  range_sql text := :KEYQ_SCHEMA.slot_range_sql(qid, slot_count);
  late :KEYQ_SCHEMA.event[];
  ranged :KEYQ_SCHEMA.event[];
  range_types constant text := 'int, pg_snapshot, pg_snapshot, xid8, bigint, int, int, xid8, bigint';
  range_args text[];
  -- The rows as one array, built by the prepared statement itself (as
  -- window_array: none handed over as a set and sorted again), typed as the
  -- table's rows (row(e.*)::event, not records converted through text).
  as_array constant text := format('select pg_catalog.array_agg(row(e.*)::%I.event) from (', :KEYQ_SCHEMA_NAME);
begin
  if (a_txid, a_id) < (pg_snapshot_xmax(s1), 0::bigint) then
    lo_txid := pg_snapshot_xmax(s1);
    lo_id := 0;
  end if;
  -- Prepared once a session (prepared_call in 01_engine.sql).
  range_args := array[qid::text, s1::text, s2::text, a_txid::text, a_id::text, max_rows::text, slot::text, lo_txid::text, lo_id::text];
  if cardinality(strag) = 0 then
    execute :KEYQ_SCHEMA.prepared_call(as_array || range_sql || ') e', range_types, range_args) into ranged;
    return ranged;
  end if;
  execute :KEYQ_SCHEMA.prepared_call(as_array || :KEYQ_SCHEMA.slot_late_sql(qid, slot_count) || ') e',
    'int, xid8, bigint, int, int, int, xid8[]',
    array[qid::text, a_txid::text, a_id::text, slot::text, max_rows::text, slot_count::text, strag::text])
    into late;
  execute :KEYQ_SCHEMA.prepared_call(as_array || range_sql || ') e', range_types, range_args) into ranged;
  if late is null then
    return ranged;
  end if;
  -- Both lists are short and sorted; this sort never sees the window.
  perform set_config('enable_sort', 'on', true);
  return array(select w from unnest(late || coalesce(ranged, '{}')) w order by w.ev_txid, w.ev_id limit max_rows);
end $$;

-- Blocks key `key` of slot `slot` behind its failed head (pause); holds the key's other
-- pending retry rows too, so nothing of the key overtakes the head.
create function :KEYQ_SCHEMA.block_key(c :KEYQ_SCHEMA.consumer, slot int, key text, head bigint) returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
  insert into :KEYQ_SCHEMA.blocked (consumer_id, slot, ev_key, head_id)
  values (c.consumer_id, block_key.slot, key, head)
  on conflict (consumer_id, slot, ev_key) do update set head_id = excluded.head_id;
  update :KEYQ_SCHEMA.retry set due_at = 'infinity'
   where consumer_id = c.consumer_id and slot = block_key.slot and ev_key = key and ev_id <> head and due_at <> 'infinity';
$$;

-- Releases the keys whose head is one of ids (acked or dead-lettered): their
-- held rows become due now and go out in original (txid, id) order. A null
-- slot: the heads of any slot (a batch that read several).
create function :KEYQ_SCHEMA.release_heads(c :KEYQ_SCHEMA.consumer, slot int, ids bigint[]) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare n int;
begin
  with freed as (
    delete from :KEYQ_SCHEMA.blocked b
     where b.consumer_id = c.consumer_id and (slot is null or b.slot = slot) and b.head_id = any (ids)
    returning b.slot, b.ev_key
  )
  update :KEYQ_SCHEMA.retry r set due_at = now()
    from freed
   where r.consumer_id = c.consumer_id and r.slot = freed.slot and r.ev_key = freed.ev_key and r.due_at = 'infinity';
  get diagnostics n = row_count;
  return n;
end $$;

-- The slots of c with events in window (t1, t2] of its queue, or null when
-- the window holds more than max_rows events (each slot then reads its own
-- rows through the slot index). One read of a small window tells
-- receive_ordered_rows which closed slots have nothing new: those close at t2
-- without a read of their own (a wake-up's window of one event visited
-- every slot, reading each through its own prepared statement).
create function :KEYQ_SCHEMA.window_slots(c :KEYQ_SCHEMA.consumer, t1 bigint, t2 bigint, max_rows int) returns int[]
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  s1 pg_snapshot;
  s2 pg_snapshot;
  seq1 bigint;
  seq2 bigint;
  keys text[];
begin
  select tick_snapshot, tick_event_seq into s1, seq1 from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = t1;
  select tick_snapshot, tick_event_seq into s2, seq2 from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = t2;
  -- Ids handed out between the ticks: far more than max_rows is a backlog,
  -- not worth a read (stragglers can add a few; the read below is exact).
  if s1 is null or s2 is null or seq2 - seq1 > 2 * max_rows then
    return null;
  end if;
  select array_agg(w.ev_key) into keys
    from unnest(:KEYQ_SCHEMA.window_array(c.queue_id, s1, s2, '0'::xid8, 0, max_rows + 1)) w;
  if coalesce(cardinality(keys), 0) > max_rows then
    return null;
  end if;
  return array(select distinct :KEYQ_SCHEMA.slot_of(k, c.slots) from unnest(keys) k);
end $$;

-- The checks every receive of an ordered consumer makes first: the kind and
-- the slot count; null when an operator paused it (07_positions.sql).
create function :KEYQ_SCHEMA.ordered_consumer(queue text, consumer text, slot_count int) returns :KEYQ_SCHEMA.consumer
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer);
begin
  if c.kind <> 'ordered' then
    raise exception 'Consumer "%" of queue "%" is a % consumer, not ordered; use another consumer name.', consumer, queue, c.kind
      using errcode = 'KQ003', hint = 'KEYQ:CONSUMER_KIND_MISMATCH';
  end if;
  perform :KEYQ_SCHEMA.check_slots(c, queue, slot_count);
  if c.paused_at is not null then
    return null;
  end if;
  return c;
end $$;

-- window_take's read of a Tier B slot for a batch's reply
-- (receive_ordered_rows): the same windows, positions and cursor update,
-- each event a line (line_select) returned by the statement that reads the
-- window, as receive_plain_rows reads a plain consumer's (see there). A
-- window where the slot has events of stragglers (transactions of this
-- queue that committed across a tick: rare) is read as an array, merged
-- (window_slot_array) and written out; on a busy database most windows have
-- stragglers of other queues and tables, and the count of the slot's
-- straggler rows tells them apart without reading a row.
create function :KEYQ_SCHEMA.window_lines(c :KEYQ_SCHEMA.consumer, cur :KEYQ_SCHEMA.cursor, max_rows int)
returns setof text
language plpgsql
set search_path = pg_catalog, pg_temp
set enable_sort = off
set enable_seqscan = off
set jit = off
set plan_cache_mode = force_generic_plan
as $$
#variable_conflict use_variable
declare
  s1 pg_snapshot;
  s2 pg_snapshot;
  room int := max_rows;
  got int;
  a_txid xid8;
  a_id bigint;
  lo_txid xid8;
  lo_id bigint;
  strag xid8[];
  late int;
  part :KEYQ_SCHEMA.event[];
  at text[];
begin
  if max_rows <= 0 then return; end if;
  cur := :KEYQ_SCHEMA.window_open(c, cur);
  if cur.end_tick_id is null then return; end if;
  select tick_snapshot into s1 from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = cur.tick_id;
  loop
    select tick_snapshot into s2 from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = cur.end_tick_id;
    a_txid := coalesce(cur.last_txid, '0'::xid8);
    a_id := coalesce(cur.last_id, 0);
    late := 0;
    strag := array(select x from pg_snapshot_xip(s1) x where pg_visible_in_snapshot(x, s2));
    if cardinality(strag) > 0 then
      execute :KEYQ_SCHEMA.prepared_call(format('select pg_catalog.count(*)::int from (%s) e', :KEYQ_SCHEMA.slot_late_sql(c.queue_id, c.slots)),
        'int, xid8, bigint, int, int, int, xid8[]',
        array[c.queue_id::text, a_txid::text, a_id::text, cur.slot::text, room::text, c.slots::text, strag::text])
        into late;
    end if;
    if late > 0 then
      part := :KEYQ_SCHEMA.window_slot_array(c.queue_id, s1, s2, a_txid, a_id, room, c.slots, cur.slot);
      got := coalesce(cardinality(part), 0);
      return query execute :KEYQ_SCHEMA.array_lines_sql() using part;
      if got > 0 then
        at := array[part[got].ev_txid::text, part[got].ev_id::text];
      end if;
    else
      -- The slot's range starts at xmax of s1 at the lowest: below it are only s1's stragglers (none of this slot's here).
      lo_txid := a_txid;
      lo_id := a_id;
      if (a_txid, a_id) < (pg_snapshot_xmax(s1), 0::bigint) then
        lo_txid := pg_snapshot_xmax(s1);
        lo_id := 0;
      end if;
      return query execute :KEYQ_SCHEMA.prepared_call(
        :KEYQ_SCHEMA.lines_sql(:KEYQ_SCHEMA.slot_range_sql(c.queue_id, c.slots)),
        'int, pg_snapshot, pg_snapshot, xid8, bigint, int, int, xid8, bigint',
        array[c.queue_id::text, s1::text, s2::text, a_txid::text, a_id::text, room::text, cur.slot::text, lo_txid::text, lo_id::text]);
      get diagnostics got = row_count;
      at := null;
    end if;
    if got = room then
      -- Full: the window stays open at the last event taken.
      at := coalesce(at, string_to_array(current_setting('keyq.read_at'), ' '));
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
  perform :KEYQ_SCHEMA.window_save(c, cur);
end $$;

-- One batch of an ordered consumer in its row form (src/engine/wire.ts): a
-- row per event of the windows read (window_lines: its fields as a JSON
-- array, its payload's JSON text after a newline), then a last row
-- {"busy": b, "slot": k, "retries": [event objects]}.
-- Tries the slots in `slots` order (then, when help_after is given, any
-- slot not polled for that many seconds): try-lock (skip a slot another
-- worker holds), then the cursor row lock — the backstop: a caller that
-- skips the try-lock blocks, never duplicates. An empty slot still has its
-- window closed, so no slot pins rotation. The first slot with events is
-- the batch's ("slot"; null when none had any): its due retries (event
-- objects) and its window's events; with pause, window events of blocked
-- keys are held instead of returned (retries never are): such a slot is
-- read as an array, filtered, then written out.
-- With multi_slot, a slot that filled less than the batch does not end it:
-- the next slots fill the rest, each one's retries and events in order,
-- and "groups": [[slot, retries, rows], …] says which slot each retry and
-- row came from. A sparse window then costs one batch, not one per slot (a
-- cold run() of 10 events over 4 slots, or a wake-up's few events); a
-- backlog fills each batch from its first slot as before. Only with the
-- try-lock: two callers that block on cursor rows in different orders
-- could deadlock. "drained": true when the batch read every slot of the
-- list that was free to its end (another look finds nothing until a new
-- tick).
create function :KEYQ_SCHEMA.receive_ordered_rows(
  queue text, consumer text, slots int[], max_events int,
  help_after float8 default null, skip_try_lock boolean default false,
  slot_count int default null, multi_slot boolean default false
) returns setof text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('consume', queue, consumer);
declare
  c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.ordered_consumer(queue, consumer, slot_count);
  multi boolean := multi_slot and not skip_try_lock;
  cur :KEYQ_SCHEMA.cursor;
  k int;
  todo int[];
  blocked_keys text[];
  tried int := 0;
  retries jsonb;
  nr int;
  evs :KEYQ_SCHEMA.event[];
  room int := max_events;
  newest bigint;
  known_from bigint;
  known int[];
  n int;
  first_slot int;
  all_retries jsonb := '[]';
  groups jsonb := '[]';
  ended boolean := false;
begin
  if c.consumer_id is null then
    return next '{"busy":true,"slot":null,"retries":[]}';
    return;
  end if;
  todo := array(select s from unnest(slots) s where s >= 0 and s < c.slots);
  if help_after is not null then
    todo := todo || array(select cu.slot from :KEYQ_SCHEMA.cursor cu
                           where cu.consumer_id = c.consumer_id and cu.slot <> all (todo)
                             and cu.polled_at < clock_timestamp() - make_interval(secs => help_after)
                           order by cu.polled_at);
  end if;
  foreach k in array todo loop
    if not skip_try_lock
       and not pg_try_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('slot', c.consumer_id::bigint * 4096 + k)) then
      continue;
    end if;
    tried := tried + 1;
    select * into cur from :KEYQ_SCHEMA.cursor cu where cu.consumer_id = c.consumer_id and cu.slot = k for update;
    retries := :KEYQ_SCHEMA.take_retries(c.consumer_id, k, room);
    nr := jsonb_array_length(retries);
    n := null;
    -- A closed slot behind the newest tick whose new window (one read for
    -- every slot closed at the same tick) holds nothing of it: closed at
    -- the newest tick, as window_take would after reading nothing.
    if cur.end_tick_id is null and cur.last_txid is null and room > nr then
      if newest is null then
        select max(tick_id) into newest from :KEYQ_SCHEMA.tick where queue_id = c.queue_id;
      end if;
      if newest > cur.tick_id then
        if known_from is distinct from cur.tick_id then
          known_from := cur.tick_id;
          known := :KEYQ_SCHEMA.window_slots(c, cur.tick_id, newest, 128);
        end if;
        if known is not null and not (k = any (known)) then
          update :KEYQ_SCHEMA.cursor set tick_id = newest, polled_at = now(), batch_at = now()
           where consumer_id = c.consumer_id and slot = k;
          n := 0;
        end if;
      end if;
    end if;
    if n is null and (c.settings->>'onFailure' is distinct from 'pause'
                      or not exists (select 1 from :KEYQ_SCHEMA.blocked b where b.consumer_id = c.consumer_id and b.slot = k)) then
      return query select l from :KEYQ_SCHEMA.window_lines(c, cur, room - nr) l;
      get diagnostics n = row_count;
    end if;
    if n is null then
      evs := :KEYQ_SCHEMA.window_take(c, cur, room - nr);
      blocked_keys := array(select b.ev_key from :KEYQ_SCHEMA.blocked b where b.consumer_id = c.consumer_id and b.slot = k);
      if cardinality(evs) > 0 and cardinality(blocked_keys) > 0 then
        perform :KEYQ_SCHEMA.park_events(c, k,
          (select coalesce(jsonb_agg(jsonb_build_object('id', (evs[i]).ev_id::text, 'txid', (evs[i]).ev_txid::text) order by i), '[]')
             from generate_subscripts(evs, 1) i where (evs[i]).ev_key = any (blocked_keys)),
          'infinity');
        evs := array(select evs[i] from generate_subscripts(evs, 1) i
                      where (evs[i]).ev_key is null or not (evs[i]).ev_key = any (blocked_keys) order by i);
      end if;
      n := cardinality(evs);
      if n > 0 then
        return query execute :KEYQ_SCHEMA.array_lines_sql() using evs;
      end if;
    end if;
    if nr > 0 or n > 0 then
      first_slot := coalesce(first_slot, k);
      all_retries := all_retries || retries;
      groups := groups || jsonb_build_array(jsonb_build_array(k, nr, n));
      room := room - nr - n;
      if not multi or room <= 0 then
        ended := true;
        exit;
      end if;
    end if;
  end loop;
  if first_slot is null then
    return next '{"busy":' || (tried = 0 and cardinality(todo) > 0)::text || ',"slot":null,"retries":[]}';
    return;
  end if;
  return next '{"busy":false,"slot":' || first_slot || ',"retries":' || all_retries::text ||
    case when multi_slot then ',"groups":' || groups::text else '' end ||
    -- Every slot of the list was read to its end or is another worker's now.
    case when multi and not ended then ',"drained":true' else '' end || '}';
end $$;

-- receive_ordered_rows' batch (one slot) as the engine's JSON event objects,
-- for SQL callers: {"busy": b, "slot": k, "events": [retries, then the
-- window's events]}.
create function :KEYQ_SCHEMA.receive_ordered(
  queue text, consumer text, slots int[], max_events int,
  help_after float8 default null, skip_try_lock boolean default false,
  slot_count int default null
) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('consume', queue, consumer);
declare head jsonb; evs jsonb;
begin
  select (array_agg(l::jsonb order by i desc) filter (where strpos(l, E'\n') = 0))[1],
         coalesce(jsonb_agg(jsonb_build_object('id', h->0, 'txid', h->1, 'type', h->2, 'key', h->3,
                                               'payload', substr(l, strpos(l, E'\n') + 1)::jsonb, 'time', h->4, 'retry', 0, 'trace', h->5)
                            order by i) filter (where strpos(l, E'\n') > 0), '[]')
    into head, evs
    from :KEYQ_SCHEMA.receive_ordered_rows(queue, consumer, slots, max_events, help_after, skip_try_lock, slot_count) with ordinality as t(l, i),
         lateral (select case when strpos(l, E'\n') > 0 then split_part(l, E'\n', 1)::jsonb end as h) x;
  return jsonb_build_object('busy', head->'busy', 'slot', head->'slot', 'events', (head->'retries') || evs);
end $$;

-- receive_ordered_rows' batch as one text, the form processes of earlier
-- builds read during a rolling deploy: its last row with "rows": [row
-- heads], followed by each payload after a newline.
create function :KEYQ_SCHEMA.receive_ordered_wire(
  queue text, consumer text, slots int[], max_events int,
  help_after float8 default null, skip_try_lock boolean default false,
  slot_count int default null, multi_slot boolean default false
) returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('consume', queue, consumer);
declare head text; heads text; payloads text;
begin
  select (array_agg(l order by i desc))[1],
         string_agg(split_part(l, E'\n', 1), ',' order by i) filter (where strpos(l, E'\n') > 0),
         string_agg(E'\n' || substr(l, strpos(l, E'\n') + 1), '' order by i) filter (where strpos(l, E'\n') > 0)
    into head, heads, payloads
    from :KEYQ_SCHEMA.receive_ordered_rows(queue, consumer, slots, max_events, help_after, skip_try_lock, slot_count, multi_slot)
           with ordinality as t(l, i);
  return left(head, -1) || ',"rows":[' || coalesce(heads, '') || ']}' || coalesce(payloads, '');
end $$;

-- Releases key k of slot s outright (its head was dead-lettered, possibly in
-- the same batch as its first failure, before any marker existed).
create function :KEYQ_SCHEMA.release_key(c :KEYQ_SCHEMA.consumer, slot int, key text) returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
  delete from :KEYQ_SCHEMA.blocked where consumer_id = c.consumer_id and slot = release_key.slot and ev_key = key;
  update :KEYQ_SCHEMA.retry set due_at = now()
   where consumer_id = c.consumer_id and slot = release_key.slot and ev_key = key and due_at = 'infinity';
$$;

-- Keys currently blocked by a failed head (pause policy).
create function :KEYQ_SCHEMA.blocked_keys(queue text, consumer text) returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select :KEYQ_SCHEMA.authorize('consume', queue, consumer);
  select coalesce(jsonb_agg(jsonb_build_object(
           'slot', b.slot, 'key', b.ev_key, 'headId', b.head_id::text, 'since', b.since,
           'held', (select count(*) from :KEYQ_SCHEMA.retry r
                     where r.consumer_id = b.consumer_id and r.slot = b.slot and r.ev_key = b.ev_key
                       and r.due_at = 'infinity'))
           order by b.slot, b.ev_key), '[]')
  from :KEYQ_SCHEMA.blocked b
  where b.consumer_id = (:KEYQ_SCHEMA.get_consumer(queue, consumer)).consumer_id
$$;
