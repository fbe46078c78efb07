-- keyq engine, part 1: queues, the event log (a ring of tables per queue),
-- ticks, consumers with cursors, the ticker, window reads, rotation.
--
-- :KEYQ_SCHEMA is replaced by the quoted, validated schema identifier and
-- :KEYQ_SCHEMA_NAME by the same name as a string literal (for lock keys and
-- dynamic DDL). Nothing else is ever spliced into this text.
--
-- Every function returns jsonb (read as text by the client), so driver type
-- parsers never matter; errors use SQLSTATE KQ### with hint 'KEYQ:<CODE>'.
--
-- src/sql/functions/ holds functions only, re-applied by migrate() whenever
-- this folder changes; tables, indexes and data live in the numbered,
-- immutable src/sql/migrations/ (README: How the engine evolves).

-- Helpers ---------------------------------------------------------------------

create function :KEYQ_SCHEMA.lock_key(scope text, id bigint) returns bigint
language sql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$ select hashtextextended(:KEYQ_SCHEMA_NAME || ':' || scope || ':' || id::text, 0) $$;

create function :KEYQ_SCHEMA.get_queue(queue text) returns :KEYQ_SCHEMA.queue
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare q :KEYQ_SCHEMA.queue;
begin
  select * into q from :KEYQ_SCHEMA.queue where queue_name = queue;
  if not found then
    raise exception 'Queue "%" does not exist; create it with createQueue("%") first.', queue, queue
      using errcode = 'KQ001', hint = 'KEYQ:QUEUE_NOT_FOUND';
  end if;
  return q;
end $$;

create function :KEYQ_SCHEMA.get_consumer(queue text, consumer text) returns :KEYQ_SCHEMA.consumer
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare q :KEYQ_SCHEMA.queue; c :KEYQ_SCHEMA.consumer;
begin
  q := :KEYQ_SCHEMA.get_queue(queue);
  select * into c from :KEYQ_SCHEMA.consumer k where k.queue_id = q.queue_id and k.consumer_name = consumer;
  if not found then
    raise exception 'Consumer "%" is not subscribed to queue "%"; call subscribe() first.', consumer, queue
      using errcode = 'KQ002', hint = 'KEYQ:CONSUMER_NOT_FOUND';
  end if;
  return c;
end $$;

create function :KEYQ_SCHEMA.queue_json(q :KEYQ_SCHEMA.queue) returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object(
    'name', q.queue_name, 'tables', q.ntables, 'currentTable', q.cur_table,
    'rotatedAt', q.rotated_at, 'rotationPeriod', extract(epoch from q.rotation_period),
    'tickMaxCount', q.tick_max_count, 'tickMaxLag', extract(epoch from q.tick_max_lag),
    'tickIdlePeriod', extract(epoch from q.tick_idle_period),
    'maxRetries', q.max_retries, 'retryBase', extract(epoch from q.retry_base),
    'retryCap', extract(epoch from q.retry_cap), 'createdAt', q.created_at)
$$;

-- Queues ----------------------------------------------------------------------

-- Applies the settings present in s (seconds for intervals) to queue q.
create function :KEYQ_SCHEMA.apply_queue_settings(qid int, s jsonb) returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
  update :KEYQ_SCHEMA.queue set
    rotation_period  = coalesce(make_interval(secs => (s->>'rotationPeriod')::float8), rotation_period),
    tick_max_count   = coalesce((s->>'tickMaxCount')::int, tick_max_count),
    tick_max_lag     = coalesce(make_interval(secs => (s->>'tickMaxLag')::float8), tick_max_lag),
    tick_idle_period = coalesce(make_interval(secs => (s->>'tickIdlePeriod')::float8), tick_idle_period),
    max_retries      = coalesce((s->>'maxRetries')::int, max_retries),
    retry_base       = coalesce(make_interval(secs => (s->>'retryBase')::float8), retry_base),
    retry_cap        = coalesce(make_interval(secs => (s->>'retryCap')::float8), retry_cap)
  where queue_id = qid
$$;

create function :KEYQ_SCHEMA.create_queue(queue text, settings jsonb default '{}') returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  qid int;
  n smallint := coalesce((settings->>'tables')::smallint, 3);
  q :KEYQ_SCHEMA.queue;
  parent text;
begin
  -- DDL of concurrent creators is serialised; the loser sees the winner's row.
  perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('ddl', 0));
  select * into q from :KEYQ_SCHEMA.queue where queue_name = queue;
  if found then
    return jsonb_build_object('created', false, 'queue', :KEYQ_SCHEMA.queue_json(q));
  end if;
  qid := nextval(':KEYQ_SCHEMA.queue_id_seq');
  parent := 'event_' || qid;
  execute format('create sequence %I.%I', :KEYQ_SCHEMA_NAME, parent || '_id_seq');
  execute format('create table %I.%I partition of %I.event for values in (%s) partition by list (ev_table)',
                 :KEYQ_SCHEMA_NAME, parent, :KEYQ_SCHEMA_NAME, qid);
  for i in 0 .. n - 1 loop
    execute format('create table %I.%I partition of %I.%I for values in (%s)',
                   :KEYQ_SCHEMA_NAME, parent || '_' || i, :KEYQ_SCHEMA_NAME, parent, i);
  end loop;
  insert into :KEYQ_SCHEMA.queue (queue_id, queue_name, event_seq, ntables)
  values (qid, queue, format('%I.%I', :KEYQ_SCHEMA_NAME, parent || '_id_seq')::regclass, n);
  perform :KEYQ_SCHEMA.apply_queue_settings(qid, settings);
  -- The first tick: consumers that subscribe now see every later event.
  insert into :KEYQ_SCHEMA.tick (queue_id, tick_id, tick_snapshot, tick_event_seq)
  values (qid, nextval(':KEYQ_SCHEMA.tick_id_seq'), pg_current_snapshot(), 0);
  select * into q from :KEYQ_SCHEMA.queue where queue_id = qid;
  return jsonb_build_object('created', true, 'queue', :KEYQ_SCHEMA.queue_json(q));
end $$;

create function :KEYQ_SCHEMA.update_queue(queue text, settings jsonb) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue);
begin
  perform :KEYQ_SCHEMA.apply_queue_settings(q.queue_id, settings);
  select * into q from :KEYQ_SCHEMA.queue where queue_id = q.queue_id;
  return :KEYQ_SCHEMA.queue_json(q);
end $$;

create function :KEYQ_SCHEMA.drop_queue(queue text) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare q :KEYQ_SCHEMA.queue;
begin
  perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('ddl', 0));
  select * into q from :KEYQ_SCHEMA.queue where queue_name = queue;
  if not found then return jsonb_build_object('dropped', false); end if;
  execute format('drop table %I.%I', :KEYQ_SCHEMA_NAME, 'event_' || q.queue_id);
  delete from :KEYQ_SCHEMA.queue where queue_id = q.queue_id;
  execute format('drop sequence %s', q.event_seq);
  return jsonb_build_object('dropped', true);
end $$;

create function :KEYQ_SCHEMA.list_queues() returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select coalesce(jsonb_agg(:KEYQ_SCHEMA.queue_json(q) order by q.queue_name), '[]')
  from :KEYQ_SCHEMA.queue q
$$;

-- Producer --------------------------------------------------------------------

-- Claims dedup key k for ttl seconds: a new event id when the key is free or
-- expired, else the live event's id. Concurrent claimers of one key wait on
-- the first one's unique index entry, so exactly one of them inserts.
create function :KEYQ_SCHEMA.claim_dedup(q :KEYQ_SCHEMA.queue, k text, ttl float8,
                                         out id bigint, out deduped boolean)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
begin
  loop
    insert into :KEYQ_SCHEMA.dedup as d (queue_id, dedup_key, ev_id, expires_at)
    values (q.queue_id, k, nextval(q.event_seq), now() + make_interval(secs => coalesce(ttl, 300)))
    on conflict (queue_id, dedup_key) do update
       set ev_id = excluded.ev_id, expires_at = excluded.expires_at
     where d.expires_at <= now()
    returning d.ev_id into id;
    if found then deduped := false; return; end if;
    select d.ev_id into id from :KEYQ_SCHEMA.dedup d where d.queue_id = q.queue_id and d.dedup_key = k;
    if found then deduped := true; return; end if;
    -- The live row expired and was collected between the two statements: claim again.
  end loop;
end $$;

create function :KEYQ_SCHEMA.send(queue text, type text, payload jsonb, key text default null,
                                  dedup_key text default null, ttl float8 default null) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue); c record;
begin
  if dedup_key is null then
    insert into :KEYQ_SCHEMA.event (queue_id, ev_table, ev_id, ev_type, ev_key, ev_data)
    values (q.queue_id, q.cur_table, nextval(q.event_seq), type, key, payload)
    returning ev_id into c;
    return jsonb_build_object('id', c.ev_id::text, 'deduped', false);
  end if;
  c := :KEYQ_SCHEMA.claim_dedup(q, dedup_key, ttl);
  if not c.deduped then
    insert into :KEYQ_SCHEMA.event (queue_id, ev_table, ev_id, ev_type, ev_key, ev_data)
    values (q.queue_id, q.cur_table, c.id, type, key, payload);
  end if;
  return jsonb_build_object('id', c.id::text, 'deduped', c.deduped);
end $$;

-- events: a JSON array of {type, key, payload, dedupKey?, ttl?}. Ids are
-- allocated in array order, so one call keeps its order inside the window.
-- Returns one entry per event: without dedup keys just the id (a string:
-- nothing was deduplicated), else {id, deduped}.
create function :KEYQ_SCHEMA.send_batch(queue text, events jsonb) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue);
  out jsonb := '[]';
  e jsonb;
  c record;
  -- Results are collected in an array (amortised O(1) appends): growing a
  -- jsonb array with || copies it every time, quadratic in the batch size.
  res jsonb[] := '{}';
begin
  if not jsonb_path_exists(events, '$[*].dedupKey') then
    -- The common path: one set-based insert.
    with ins as (
      insert into :KEYQ_SCHEMA.event (queue_id, ev_table, ev_id, ev_type, ev_key, ev_data)
      select q.queue_id, q.cur_table, nextval(q.event_seq), x.v->>'type', x.v->>'key', x.v->'payload'
      from jsonb_array_elements(events) with ordinality as x(v, ord)
      returning ev_id
    )
    select coalesce(jsonb_agg(ev_id::text order by ev_id), '[]') into out from ins;
    return out;
  end if;
  for e in select x.v from jsonb_array_elements(events) with ordinality as x(v, ord) order by x.ord loop
    if e->>'dedupKey' is null then
      insert into :KEYQ_SCHEMA.event (queue_id, ev_table, ev_id, ev_type, ev_key, ev_data)
      values (q.queue_id, q.cur_table, nextval(q.event_seq), e->>'type', e->>'key', e->'payload')
      returning ev_id as id, false as deduped into c;
    else
      c := :KEYQ_SCHEMA.claim_dedup(q, e->>'dedupKey', (e->>'ttl')::float8);
      if not c.deduped then
        insert into :KEYQ_SCHEMA.event (queue_id, ev_table, ev_id, ev_type, ev_key, ev_data)
        values (q.queue_id, q.cur_table, c.id, e->>'type', e->>'key', e->'payload');
      end if;
    end if;
    res := res || jsonb_build_object('id', c.id::text, 'deduped', c.deduped);
  end loop;
  return to_jsonb(res);
end $$;

-- Ticker ----------------------------------------------------------------------

-- True when an event committed that the last tick does not cover. Only the
-- txids the snapshot could not see are probed (>= its xmax, or in its xip),
-- so a long transaction holding xmin back does not widen the scan. Sequential
-- scans are off: with no statistics yet the planner may otherwise read the
-- whole table to prove that nothing is pending, on every run.
create function :KEYQ_SCHEMA.has_pending(qid int, snap pg_snapshot) returns boolean
language sql stable
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
as $$
  select exists (select 1 from :KEYQ_SCHEMA.event
                  where queue_id = qid and ev_txid >= pg_snapshot_xmax(snap))
      or exists (select 1 from :KEYQ_SCHEMA.event
                  where queue_id = qid
                    and ev_txid = any (array(select pg_snapshot_xip(snap))))
$$;

-- Writes a tick when the policy says so and nobody else is ticking this queue.
-- Returns {"tick": id} or {"tick": null, "reason": ...}. Must run in its own
-- READ COMMITTED transaction: the snapshot is taken by a statement that starts
-- after the lock is held, so it includes every earlier tick's commit.
create function :KEYQ_SCHEMA.tick(queue text, force boolean default false) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue);
  last :KEYQ_SCHEMA.tick;
  seq bigint;
  due boolean;
  id bigint;
begin
  if current_setting('transaction_isolation') <> 'read committed' then
    raise exception 'The ticker must run in a READ COMMITTED transaction, not %.', current_setting('transaction_isolation')
      using errcode = 'KQ010', hint = 'KEYQ:WRONG_ISOLATION';
  end if;
  if not pg_try_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('tick', q.queue_id)) then
    return jsonb_build_object('tick', null, 'reason', 'busy');
  end if;
  select * into last from :KEYQ_SCHEMA.tick where queue_id = q.queue_id order by tick_id desc limit 1;
  seq := coalesce(pg_sequence_last_value(q.event_seq), 0);
  due := force or last is null
      or clock_timestamp() - last.tick_time >= q.tick_idle_period
      or (:KEYQ_SCHEMA.has_pending(q.queue_id, last.tick_snapshot)
          and (clock_timestamp() - last.tick_time >= q.tick_max_lag
               or seq - last.tick_event_seq >= q.tick_max_count));
  if not due then
    return jsonb_build_object('tick', null, 'reason', 'idle');
  end if;
  insert into :KEYQ_SCHEMA.tick (queue_id, tick_id, tick_snapshot, tick_event_seq)
  values (q.queue_id, nextval(':KEYQ_SCHEMA.tick_id_seq'), pg_current_snapshot(), seq)
  returning tick_id into id;
  return jsonb_build_object('tick', id::text);
end $$;

-- Window reads ----------------------------------------------------------------

-- The events of window (s1, s2] after position (a_txid, a_id), in (txid, id)
-- order. Candidates are the txids s1 could not see: those in s1's xip that s2
-- sees (stragglers that finished inside the window) and those in
-- [xmax(s1), xmax(s2)); both are index range scans on (ev_txid, ev_id).
-- Sorts and sequential scans are off so the plan is an ordered index scan
-- that stops at the limit whatever the row estimates say: otherwise a big
-- window could be re-read whole for every batch. Both branches are ordered
-- the same way, so the union is a merge, never a sort; jit is off as a
-- backstop (a disabled sort is priced at 1e10, which would JIT every call).
create function :KEYQ_SCHEMA.window_events(
  qid int, s1 pg_snapshot, s2 pg_snapshot, a_txid xid8, a_id bigint, lim int
) returns setof :KEYQ_SCHEMA.event
language sql stable
set search_path = pg_catalog, pg_temp
set enable_sort = off
set enable_seqscan = off
set jit = off
as $$
  select w.* from (
    (select e.* from :KEYQ_SCHEMA.event e
      where e.queue_id = qid
        and e.ev_txid = any (array(select x from pg_snapshot_xip(s1) x where pg_visible_in_snapshot(x, s2)))
        and (e.ev_txid, e.ev_id) > (a_txid, a_id)
      order by e.ev_txid, e.ev_id limit lim)
    union all
    (select e.* from :KEYQ_SCHEMA.event e
      where e.queue_id = qid
        and e.ev_txid >= pg_snapshot_xmax(s1) and e.ev_txid < pg_snapshot_xmax(s2)
        and (e.ev_txid, e.ev_id) > (a_txid, a_id)
        and pg_visible_in_snapshot(e.ev_txid, s2)
      order by e.ev_txid, e.ev_id limit lim)
  ) w
  order by w.ev_txid, w.ev_id
  limit lim
$$;

-- How many events window (s1, s2] holds, counting at most lim (null: all):
-- status() counts real events (sequence values also go to deduplicated and
-- rolled-back sends). The same two range scans of the (ev_txid, ev_id) index
-- as window_events, without the rows.
create function :KEYQ_SCHEMA.window_count(qid int, s1 pg_snapshot, s2 pg_snapshot, lim bigint default null)
returns bigint
language sql stable
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
set jit = off
as $$
  select count(*) from (
    (select 1 from :KEYQ_SCHEMA.event e
      where e.queue_id = qid
        and e.ev_txid = any (array(select x from pg_snapshot_xip(s1) x where pg_visible_in_snapshot(x, s2))))
    union all
    (select 1 from :KEYQ_SCHEMA.event e
      where e.queue_id = qid
        and e.ev_txid >= pg_snapshot_xmax(s1) and e.ev_txid < pg_snapshot_xmax(s2)
        and pg_visible_in_snapshot(e.ev_txid, s2))
    limit lim) w
$$;

create function :KEYQ_SCHEMA.event_json(e :KEYQ_SCHEMA.event, retry int default 0) returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select jsonb_build_object('id', e.ev_id::text, 'txid', e.ev_txid::text, 'type', e.ev_type,
                            'key', e.ev_key, 'payload', e.ev_data, 'time', e.ev_time, 'retry', retry)
$$;

-- Consumers -------------------------------------------------------------------

-- An ordered consumer needs the slot index for its N (an exclusive one the
-- index for its bucket count): when a ring table can
-- only be indexed concurrently, nothing is created and the answer lists the
-- statements the client runs (outside a transaction) before calling again.
create function :KEYQ_SCHEMA.subscribe(queue text, consumer text, kind text default 'plain',
                                       slots int default 1, settings jsonb default '{}',
                                       index_inline boolean default false) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue);
  c :KEYQ_SCHEMA.consumer;
  t bigint;
  pending jsonb;
begin
  perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('subscribe', q.queue_id));
  select * into c from :KEYQ_SCHEMA.consumer k where k.queue_id = q.queue_id and k.consumer_name = consumer;
  if found then
    if c.kind <> kind then
      raise exception 'Consumer "%" of queue "%" is a % consumer, not %; use another consumer name.', consumer, queue, c.kind, kind
        using errcode = 'KQ003', hint = 'KEYQ:CONSUMER_KIND_MISMATCH';
    end if;
    -- Key buckets, perKey and lockScope of an exclusive consumer are fixed
    -- when it is created, like a slot count: refused, not overwritten.
    if kind = 'exclusive' and (
         coalesce(c.settings->'buckets', to_jsonb(:KEYQ_SCHEMA.xbuckets())) <> coalesce(settings->'buckets', to_jsonb(:KEYQ_SCHEMA.xbuckets()))
         or coalesce(c.settings->'perKey', '1') <> coalesce(settings->'perKey', '1')
         or c.settings->'lockScope' is distinct from settings->'lockScope') then
      raise exception 'Consumer "%" of queue "%" was created with buckets %, perKey % and lockScope %, persisted when it was created, not buckets %, perKey % and lockScope %; pass the same options or use another consumer name.',
        consumer, queue, coalesce(c.settings->>'buckets', :KEYQ_SCHEMA.xbuckets()::text), coalesce(c.settings->>'perKey', '1'),
        coalesce(c.settings->>'lockScope', '(the consumer)'), coalesce(settings->>'buckets', :KEYQ_SCHEMA.xbuckets()::text),
        coalesce(settings->>'perKey', '1'), coalesce(settings->>'lockScope', '(the consumer)')
        using errcode = 'KQ011', hint = 'KEYQ:CONSUMER_OPTION_MISMATCH';
    end if;
    if c.settings is distinct from settings then
      update :KEYQ_SCHEMA.consumer k set settings = subscribe.settings where k.consumer_id = c.consumer_id;
    end if;
    if c.slots <> slots then
      raise exception 'Consumer "%" of queue "%" has % slots, persisted when it was created; pass slots: % or use another consumer name.', consumer, queue, c.slots, c.slots
        using errcode = 'KQ004', hint = 'KEYQ:SLOT_COUNT_MISMATCH';
    end if;
    if kind = 'exclusive' then
      -- A consumer created before Tier A read through the slot index gets it now.
      pending := :KEYQ_SCHEMA.ensure_slot_index(q.queue_id, :KEYQ_SCHEMA.consumer_buckets(c), index_inline);
      if pending is not null then
        return pending || jsonb_build_object('created', false);
      end if;
    end if;
    return jsonb_build_object('created', false);
  end if;
  -- Maintenance skips the queue until this commits: with no cursor yet,
  -- tick pruning would otherwise delete the start tick read below, and the
  -- first window would read from a missing snapshot (nothing, silently).
  perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('maintain', q.queue_id));
  select max(tick_id) into t from :KEYQ_SCHEMA.tick where queue_id = q.queue_id;
  if kind in ('ordered', 'exclusive') then
    -- An exclusive consumer reads its key buckets through the slot index for its bucket count.
    pending := :KEYQ_SCHEMA.ensure_slot_index(q.queue_id,
                 case kind when 'ordered' then slots
                   else coalesce((settings->>'buckets')::int, :KEYQ_SCHEMA.xbuckets()) end, index_inline);
    if pending is not null then
      return pending || jsonb_build_object('created', false);
    end if;
  end if;
  insert into :KEYQ_SCHEMA.consumer (queue_id, consumer_name, kind, slots, settings)
  values (q.queue_id, consumer, kind, slots, settings) returning * into c;
  insert into :KEYQ_SCHEMA.cursor (consumer_id, slot, tick_id, polled_at)
  select c.consumer_id, s, t, now() from generate_series(0, slots - 1) s;
  return jsonb_build_object('created', true);
end $$;

create function :KEYQ_SCHEMA.unsubscribe(queue text, consumer text) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue); n int;
begin
  delete from :KEYQ_SCHEMA.consumer k where k.queue_id = q.queue_id and k.consumer_name = consumer;
  get diagnostics n = row_count;
  return jsonb_build_object('removed', n > 0);
end $$;

-- Maintenance -----------------------------------------------------------------

-- Switches the queue to its next ring table after emptying it. Safe because:
-- the ACCESS EXCLUSIVE lock waits out every transaction that inserted into
-- that table (they hold ROW EXCLUSIVE until they end), and the table is only
-- truncated when the least advanced cursor's snapshot sees all its rows.
create function :KEYQ_SCHEMA.rotate(queue text, force boolean default false) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue);
  nxt smallint := (q.cur_table + 1) % q.ntables;
  oldest pg_snapshot;
  prev_timeout text := current_setting('lock_timeout');
begin
  if not force and now() - q.rotated_at < q.rotation_period then
    return jsonb_build_object('rotated', false, 'reason', 'not due');
  end if;
  begin
    perform set_config('lock_timeout', '1s', true);
    execute format('lock table %I.%I in access exclusive mode', :KEYQ_SCHEMA_NAME, 'event_' || q.queue_id || '_' || nxt);
    perform set_config('lock_timeout', prev_timeout, true);
  exception when lock_not_available then
    return jsonb_build_object('rotated', false, 'reason', 'busy');
  end;
  select t.tick_snapshot into oldest
    from :KEYQ_SCHEMA.cursor cu
    join :KEYQ_SCHEMA.consumer k on k.consumer_id = cu.consumer_id
    join :KEYQ_SCHEMA.tick t on t.queue_id = k.queue_id and t.tick_id = cu.tick_id
   where k.queue_id = q.queue_id
   order by cu.tick_id limit 1;
  if oldest is not null and exists (
      select 1 from :KEYQ_SCHEMA.event e
       where e.queue_id = q.queue_id and e.ev_table = nxt
         and (e.ev_txid >= pg_snapshot_xmax(oldest)
              or e.ev_txid = any (array(select pg_snapshot_xip(oldest))))) then
    return jsonb_build_object('rotated', false, 'reason', 'lagging consumer');
  end if;
  execute format('truncate %I.%I', :KEYQ_SCHEMA_NAME, 'event_' || q.queue_id || '_' || nxt);
  update :KEYQ_SCHEMA.queue set cur_table = nxt, rotated_at = now() where queue_id = q.queue_id;
  return jsonb_build_object('rotated', true, 'table', nxt);
end $$;

-- Drops ticks no cursor needs any more (all but the newest one before the
-- oldest cursor position, so a new subscriber still has a start).
create function :KEYQ_SCHEMA.prune_ticks(qid int) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare keep bigint; n int;
begin
  select min(cu.tick_id) into keep
    from :KEYQ_SCHEMA.cursor cu join :KEYQ_SCHEMA.consumer k using (consumer_id)
   where k.queue_id = qid;
  if keep is null then
    select max(tick_id) into keep from :KEYQ_SCHEMA.tick where queue_id = qid;
  end if;
  delete from :KEYQ_SCHEMA.tick where queue_id = qid and tick_id < keep;
  get diagnostics n = row_count;
  return n;
end $$;
