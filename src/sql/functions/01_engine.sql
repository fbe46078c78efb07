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
language plpgsql immutable parallel safe
set search_path = pg_catalog, pg_temp
as $$
begin
  return hashtextextended(:KEYQ_SCHEMA_NAME || ':' || scope || ':' || id::text, 0);
end $$;

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
    'retryCap', extract(epoch from q.retry_cap),
    'retention', extract(epoch from q.retention), 'createdAt', q.created_at)
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
    retry_cap        = coalesce(make_interval(secs => (s->>'retryCap')::float8), retry_cap),
    -- retention: seconds; 0 (or JSON null) turns it off.
    retention        = case when s ? 'retention'
                            then nullif(make_interval(secs => coalesce((s->>'retention')::float8, 0)), '0 seconds'::interval)
                            else retention end
  where queue_id = qid
$$;

create function :KEYQ_SCHEMA.create_queue(queue text, settings jsonb default '{}') returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('create queues');
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
  insert into :KEYQ_SCHEMA.queue (queue_id, queue_name, event_seq, ntables, left_at)
  values (qid, queue, format('%I.%I', :KEYQ_SCHEMA_NAME, parent || '_id_seq')::regclass, n,
          array_fill(null::timestamptz, array[n::int]));
  perform :KEYQ_SCHEMA.apply_queue_settings(qid, settings);
  -- The first tick, and the start of the retained range: no event precedes it.
  insert into :KEYQ_SCHEMA.tick (queue_id, tick_id, tick_snapshot, tick_event_seq)
  values (qid, nextval(':KEYQ_SCHEMA.tick_id_seq'), pg_current_snapshot(), 0);
  update :KEYQ_SCHEMA.queue set floor_tick = currval(':KEYQ_SCHEMA.tick_id_seq') where queue_id = qid;
  select * into q from :KEYQ_SCHEMA.queue where queue_id = qid;
  return jsonb_build_object('created', true, 'queue', :KEYQ_SCHEMA.queue_json(q));
end $$;

create function :KEYQ_SCHEMA.update_queue(queue text, settings jsonb) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('change queue settings');
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
declare authorized boolean := :KEYQ_SCHEMA.authorize('drop queues');
declare q :KEYQ_SCHEMA.queue;
begin
  perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('ddl', 0));
  select * into q from :KEYQ_SCHEMA.queue where queue_name = queue;
  if not found then return jsonb_build_object('dropped', false); end if;
  execute format('drop table %I.%I', :KEYQ_SCHEMA_NAME, 'event_' || q.queue_id);
  delete from :KEYQ_SCHEMA.queue where queue_id = q.queue_id;
  -- No foreign key cascades to the dedup table (019_producer.sql).
  delete from :KEYQ_SCHEMA.dedup where queue_id = q.queue_id;
  execute format('drop sequence %s', q.event_seq);
  return jsonb_build_object('dropped', true);
end $$;

create function :KEYQ_SCHEMA.list_queues() returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select :KEYQ_SCHEMA.authorize('list queues');
  select coalesce(jsonb_agg(:KEYQ_SCHEMA.queue_json(q) order by q.queue_name), '[]')
  from :KEYQ_SCHEMA.queue q
$$;

-- Producer --------------------------------------------------------------------

-- Claims dedup key k for ttl seconds: a new event id when the key is free or
-- expired, else the live event's id. Concurrent claimers of one key wait on
-- the first one's unique index entry, so exactly one of them inserts.
create function :KEYQ_SCHEMA.claim_dedup(q :KEYQ_SCHEMA.queue, k text, ttl float8, new_id bigint default null,
                                         out id bigint, out deduped boolean)
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
begin
  loop
    insert into :KEYQ_SCHEMA.dedup as d (queue_id, dedup_key, ev_id, expires_at)
    values (q.queue_id, k, coalesce(new_id, nextval(q.event_seq)), now() + make_interval(secs => coalesce(ttl, 300)))
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
                                  dedup_key text default null, ttl float8 default null,
                                  trace text default null) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('produce', queue);
declare q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue); c record;
begin
  -- Wakes listening workers when this transaction commits (identical
  -- notifications of one transaction are folded into one; the transaction
  -- id lets a process whose workers all hear it wake only one of them).
  perform pg_notify(:KEYQ_SCHEMA_NAME, queue || ':sent:' || pg_current_xact_id()::text);
  if dedup_key is null then
    insert into :KEYQ_SCHEMA.event (queue_id, ev_table, ev_id, ev_type, ev_key, ev_data, ev_trace)
    values (q.queue_id, q.cur_table, nextval(q.event_seq), type, key, payload, trace)
    returning ev_id into c;
    return jsonb_build_object('id', c.ev_id::text, 'deduped', false);
  end if;
  c := :KEYQ_SCHEMA.claim_dedup(q, dedup_key, ttl);
  if not c.deduped then
    insert into :KEYQ_SCHEMA.event (queue_id, ev_table, ev_id, ev_type, ev_key, ev_data, ev_trace)
    values (q.queue_id, q.cur_table, c.id, type, key, payload, trace);
  end if;
  return jsonb_build_object('id', c.id::text, 'deduped', c.deduped);
end $$;

-- Claims a batch's distinct dedup keys (append_rows), each with its first
-- event's id, in key order (byte order: the same on every server), so two
-- batches sharing keys lock them in the same order and never deadlock.
-- Returns how many keys it claimed now; keys held by a live claim are not
-- counted. Only a count: the claimed keys and ids are read back only when
-- some key was not claimed (resolve_claims), and building them as arrays
-- was about 10 % of a 100,000-key claim. With try_plain, a plain insert
-- goes first: it skips the speculative insertion of ON CONFLICT (measured:
-- 40 % of a 100,000-key claim), and fails on the first key that is held
-- (live or expired; after waiting for an uncommitted holder, as the claim
-- below does), which then decides every key. The try costs a
-- subtransaction: large batches only.
create function :KEYQ_SCHEMA.claim_keys(q :KEYQ_SCHEMA.queue, dedup_keys text[], ttls float8[], ids bigint[],
                                        try_plain boolean) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare claimed int;
begin
  if try_plain then
    begin
      insert into :KEYQ_SCHEMA.dedup as d (queue_id, dedup_key, ev_id, expires_at)
      select q.queue_id, f.k, f.id, now() + make_interval(secs => coalesce(f.ttl, 300))
        from (select distinct on (u.k collate "C") u.k, u.ttl, u.id
                from unnest(dedup_keys, ttls, ids) with ordinality as u(k, ttl, id, ord)
               where u.k is not null
               order by u.k collate "C", u.ord) as f
       order by f.k collate "C";
      get diagnostics claimed = row_count;
      return claimed;
    exception when unique_violation then
      null;
    end;
  end if;
  insert into :KEYQ_SCHEMA.dedup as d (queue_id, dedup_key, ev_id, expires_at)
  select q.queue_id, f.k, f.id, now() + make_interval(secs => coalesce(f.ttl, 300))
    from (select distinct on (u.k collate "C") u.k, u.ttl, u.id
            from unnest(dedup_keys, ttls, ids) with ordinality as u(k, ttl, id, ord)
           where u.k is not null
           order by u.k collate "C", u.ord) as f
   order by f.k collate "C"
  on conflict (queue_id, dedup_key) do update
     set ev_id = excluded.ev_id, expires_at = excluded.expires_at
   where d.expires_at <= now();
  get diagnostics claimed = row_count;
  return claimed;
end $$;

-- Appends one event per array element, in array order: types, keys,
-- payloads (JSON texts), and where dedup_keys is not null a dedup key (null:
-- none) and a ttl in seconds (null: 300) per event. Returns the ids drawn for
-- the events (in array order: one statement keeps its order inside the
-- window) and, per event, the id it is answered with: its own when it was
-- appended, the first event's of its key or the live event's when it was
-- deduplicated. Set-based: a 100,000-event batch with dedup keys is a few
-- statements over arrays, no per-event loop.
create function :KEYQ_SCHEMA.append_rows(q :KEYQ_SCHEMA.queue, types text[], keys text[], docs text[],
                                         dedup_keys text[], ttls float8[], trace text,
                                         out ids bigint[], out rids bigint[])
language plpgsql
set search_path = pg_catalog, pg_temp
-- Row estimates of joins over arrays are guesses: JIT compiling them costs
-- more than the statements run.
set jit = off
as $$
#variable_conflict use_variable
declare
  n int := coalesce(array_length(types, 1), 0);
  keyed int;
begin
  if coalesce(array_length(keys, 1), 0) <> n or coalesce(array_length(docs, 1), 0) <> n
     or coalesce(array_length(dedup_keys, 1), n) <> n or coalesce(array_length(ttls, 1), n) <> n then
    raise exception 'send_rows: % types, % keys, % payloads, % dedup keys and % ttls; give one of each per event.',
      n, coalesce(array_length(keys, 1), 0), coalesce(array_length(docs, 1), 0),
      coalesce(array_length(dedup_keys, 1), 0), coalesce(array_length(ttls, 1), 0)
      using errcode = '22023';
  end if;
  ids := array(select nextval(q.event_seq) from generate_series(1, n));
  rids := ids;
  if dedup_keys is not null then
    keyed := (select count(u.k) from unnest(dedup_keys) as u(k));
    -- Unless every key was distinct and claimed now (then each event keeps
    -- its own id), map each event to its key's claim.
    if :KEYQ_SCHEMA.claim_keys(q, dedup_keys, ttls, ids, keyed >= 1000) < keyed then
      rids := :KEYQ_SCHEMA.resolve_claims(q, dedup_keys, ttls, ids);
    end if;
  end if;
  -- An event is appended when it has no key, or it is the first of a key this batch claimed.
  insert into :KEYQ_SCHEMA.event (queue_id, ev_table, ev_id, ev_type, ev_key, ev_data, ev_trace)
  select q.queue_id, q.cur_table, u.id, u.t, u.k, u.p::jsonb, trace
    from unnest(ids, rids, types, keys, docs) as u(id, rid, t, k, p)
   where u.rid = u.id;
end $$;

-- The id each event of a batch is answered with (append_rows), after
-- claim_keys: its key's claim (this batch's, or a live claim of another
-- transaction), or its own id when it has no key. Read in a new statement,
-- which sees claims committed while the claim waited for them; this
-- batch's own claims are its own writes.
create function :KEYQ_SCHEMA.resolve_claims(q :KEYQ_SCHEMA.queue, dedup_keys text[], ttls float8[], ids bigint[])
returns bigint[]
language plpgsql
set search_path = pg_catalog, pg_temp
set jit = off
as $$
#variable_conflict use_variable
declare r record; c record; ck text[]; cid bigint[];
begin
  select coalesce(array_agg(d.dedup_key), '{}'), coalesce(array_agg(d.ev_id), '{}') into ck, cid
    from (select distinct u.k from unnest(dedup_keys) as u(k) where u.k is not null) as w
    join :KEYQ_SCHEMA.dedup d on d.queue_id = q.queue_id and d.dedup_key = w.k;
  -- A live claim that expired and was collected in between: claim it alone.
  for r in select distinct on (u.k collate "C") u.k, u.ttl, u.id
             from unnest(dedup_keys, ttls, ids) with ordinality as u(k, ttl, id, ord)
             left join unnest(ck) as m(k) on m.k = u.k
            where u.k is not null and m.k is null
            order by u.k collate "C", u.ord loop
    c := :KEYQ_SCHEMA.claim_dedup(q, r.k, r.ttl, r.id);
    ck := ck || r.k;
    cid := cid || c.id;
  end loop;
  return array(select coalesce(m.id, u.id)
                 from unnest(dedup_keys, ids) with ordinality as u(k, id, ord)
                 left join unnest(ck, cid) as m(k, id) on m.k = u.k
                order by u.ord);
end $$;

-- The client's batch send: one column per field, the payloads as one text of
-- JSON documents separated by newlines (JSON text holds no raw newline), so
-- the server parses each payload once and builds nothing per event.
-- Returns {"ids": [[first id, count], …], "dup": [[index, id], …]}: the ids
-- drawn for the events as runs (one run unless other sessions drew ids of
-- the queue at the same time), and the events answered with another
-- event's id (deduplicated), by 0-based index.
create function :KEYQ_SCHEMA.send_rows(queue text, types text[], keys text[], payloads text,
                                       dedup_keys text[] default null, ttls float8[] default null,
                                       trace text default null) returns text
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('produce', queue);
declare
  q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue);
  n int := coalesce(array_length(types, 1), 0);
  a record;
  runs text;
  dup text := '[]';
begin
  if n = 0 then return '{"ids":[],"dup":[]}'; end if;
  -- Wakes listening workers when this transaction commits (identical
  -- notifications of one transaction are folded into one; the transaction
  -- id lets a process whose workers all hear it wake only one of them).
  perform pg_notify(:KEYQ_SCHEMA_NAME, queue || ':sent:' || pg_current_xact_id()::text);
  a := :KEYQ_SCHEMA.append_rows(q, types, keys, string_to_array(payloads, E'\n'), dedup_keys, ttls, trace);
  if a.ids[n] - a.ids[1] = n - 1 then
    runs := format('[["%s",%s]]', a.ids[1], n);
  else
    select json_agg(json_build_array(r.first::text, r.count) order by r.first)::text into runs
      from (select min(u.id) as first, count(*) as count
              from unnest(a.ids) with ordinality as u(id, ord) group by u.id - u.ord) as r;
  end if;
  if dedup_keys is not null then
    select coalesce(json_agg(json_build_array(u.ord - 1, u.rid::text) order by u.ord)::text, '[]') into dup
      from unnest(a.ids, a.rids) with ordinality as u(id, rid, ord)
     where u.rid <> u.id;
  end if;
  return format('{"ids":%s,"dup":%s}', runs, dup);
end $$;

-- events: a JSON array of {type, key, payload, dedupKey?, ttl?}, for SQL
-- callers (the client sends send_rows). Ids are allocated in array order.
-- Returns one entry per event: without dedup keys just the id (a string:
-- nothing was deduplicated), else {id, deduped}.
create function :KEYQ_SCHEMA.send_batch(queue text, events jsonb, trace text default null) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('produce', queue);
declare
  q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue);
  deduping boolean := jsonb_path_exists(events, '$[*].dedupKey');
  c record;
  a record;
  out jsonb;
begin
  perform pg_notify(:KEYQ_SCHEMA_NAME, queue || ':sent:' || pg_current_xact_id()::text);
  select coalesce(array_agg(x.v->>'type' order by x.ord), '{}') as types, array_agg(x.v->>'key' order by x.ord) as keys,
         array_agg((x.v->'payload')::text order by x.ord) as docs,
         array_agg(x.v->>'dedupKey' order by x.ord) as dedup_keys, array_agg((x.v->>'ttl')::float8 order by x.ord) as ttls
    into c from jsonb_array_elements(events) with ordinality as x(v, ord);
  a := :KEYQ_SCHEMA.append_rows(q, c.types, c.keys, c.docs, case when deduping then c.dedup_keys end,
                                case when deduping then c.ttls end, trace);
  if not deduping then
    select coalesce(jsonb_agg(u.id::text order by u.ord), '[]') into out from unnest(a.ids) with ordinality as u(id, ord);
  else
    select jsonb_agg(jsonb_build_object('id', u.rid::text, 'deduped', u.rid <> u.id) order by u.ord) into out
      from unnest(a.ids, a.rids) with ordinality as u(id, rid, ord);
  end if;
  return out;
end $$;

-- Ticker ----------------------------------------------------------------------

-- The command that runs query (its parameters $1..$n typed by types, at
-- most 9) with args: "execute <name>(<args>)" for this session's prepared
-- statement of query, prepared first when missing. The reads of one queue's
-- partitions address them by name (see has_pending), so they are dynamic
-- SQL, which plans every call (~0.2 ms each, 2 to 4 a batch, often longer
-- than the execution); a prepared statement keeps its generic plan (the
-- callers force it: their plans do not depend on the values). The name is a
-- hash of the text, which holds the schema and the queue's table, so one
-- session serves several schemas. A server session keeps at most 256 of
-- them, first come; past that, and when the caller says not to (status()
-- over every queue, whose statements would fill the 256 for one use each),
-- the command is the query itself, planned for this call.
-- Arguments are keyq's own snapshots, positions and counts, written as
-- typed literals (EXECUTE takes no bind parameters); never a key or a payload.
create function :KEYQ_SCHEMA.prepared_call(query text, types text, args text[], prepare boolean default true) returns text
language plpgsql volatile
set search_path = pg_catalog, pg_temp
as $$
declare
  n text := 'keyq_' || md5(types || ':' || query);
  t text[] := string_to_array(types, ', ');
  q text := query;
  ready boolean;
begin
  if prepare then
    -- One look at the session's statements when it is there (every call but the first).
    ready := exists (select 1 from pg_prepared_statements p where p.name = n);
    if not ready and (select count(*) from pg_prepared_statements p where p.name like 'keyq\_%') < 256 then
      execute format('prepare %I(%s) as %s', n, types, query);
      ready := true;
    end if;
    if ready then
      return format('execute %I(%s)', n,
                    (select string_agg(quote_nullable(a) || '::' || t[i], ', ' order by i) from unnest(args) with ordinality as u(a, i)));
    end if;
  end if;
  for i in reverse cardinality(args)..1 loop
    q := replace(q, '$' || i, '(' || quote_nullable(args[i]) || '::' || t[i] || ')');
  end loop;
  return q;
end $$;

-- True when an event committed that the last tick does not cover. Only the
-- txids the snapshot could not see are probed (>= its xmax, or in its xip),
-- so a long transaction holding xmin back does not widen the scan. Sequential
-- scans are off: with no statistics yet the planner may otherwise read the
-- whole table to prove that nothing is pending, on every run.
create function :KEYQ_SCHEMA.has_pending(qid int, snap pg_snapshot) returns boolean
language plpgsql volatile
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
set plan_cache_mode = force_generic_plan
as $$
declare found_one boolean;
begin
  -- The queue's own partition by name (event_<qid>), never the parent: a
  -- statement on the parent with the queue id as a parameter plans, opens
  -- and locks every queue's partitions, so its cost grew with the number of
  -- queues (and its locks filled the shared lock table).
  execute :KEYQ_SCHEMA.prepared_call(format($q$
    select exists (select 1 from %1$I.%2$I where ev_txid >= pg_catalog.pg_snapshot_xmax($1))
        or exists (select 1 from %1$I.%2$I where ev_txid = any (array(select pg_catalog.pg_snapshot_xip($1)))) $q$,
    :KEYQ_SCHEMA_NAME, 'event_' || qid), 'pg_snapshot', array[snap::text])
    into found_one;
  return found_one;
end $$;

-- Writes a tick when the policy says so and nobody else is ticking this queue.
-- Returns {"tick": id} or {"tick": null, "reason": ...}. Must run in its own
-- READ COMMITTED transaction: the snapshot is taken by a statement that starts
-- after the lock is held, so it includes every earlier tick's commit.
create function :KEYQ_SCHEMA.tick(queue text, force boolean default false) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize(case when force then 'force ticks' else 'housekeep' end, queue);
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
  -- A forced tick waits for a concurrent ticker (a short transaction) instead
  -- of giving up: that ticker's snapshot may predate commits the caller has
  -- seen, and "force" promises a tick that covers them.
  if force then
    perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('tick', q.queue_id));
  elsif not pg_try_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('tick', q.queue_id)) then
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
  -- Wakes the queue's listening workers: a new window is readable. (Queue
  -- names hold no ':', so '<queue>:tick:<id>' cannot be a producer's
  -- payload; the id tells the worker that wrote the tick its own.)
  perform pg_notify(:KEYQ_SCHEMA_NAME, queue || ':tick:' || id);
  return jsonb_build_object('tick', id::text);
end $$;

-- Window reads ----------------------------------------------------------------

-- The statement that reads window ($1, $2] of queue qid after position
-- ($3, $4), at most $5 rows, as window_array describes; window_array
-- aggregates its rows r, receive_plain_rows (02_failures.sql) returns them. This and the other
-- statement-text helpers are plpgsql: a language sql function with a SET
-- clause is never inlined, so each call would parse and plan its query.
create function :KEYQ_SCHEMA.window_range_sql(qid int) returns text
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
begin
  return format($q$
    (select e.* from %1$I.%2$I e
      where e.ev_txid = any (array(select x from pg_catalog.pg_snapshot_xip($1) x where pg_catalog.pg_visible_in_snapshot(x, $2)))
        and (e.ev_txid, e.ev_id) > ($3, $4)
      order by e.ev_txid, e.ev_id limit $5)
    union all
    (select e.* from %1$I.%2$I e
      where e.ev_txid >= pg_catalog.pg_snapshot_xmax($1) and e.ev_txid < pg_catalog.pg_snapshot_xmax($2)
        and (e.ev_txid, e.ev_id) > ($3, $4)
        and pg_catalog.pg_visible_in_snapshot(e.ev_txid, $2)
      order by e.ev_txid, e.ev_id limit $5)
    order by ev_txid, ev_id
    limit $5 $q$, :KEYQ_SCHEMA_NAME, 'event_' || qid);
end $$;

-- The events of window (s1, s2] after position (a_txid, a_id), in (txid, id)
-- order. Candidates are the txids s1 could not see: those in s1's xip that s2
-- sees (stragglers that finished inside the window) and those in
-- [xmax(s1), xmax(s2)); both are index range scans on (ev_txid, ev_id).
-- Sorts and sequential scans are off so the plan is an ordered index scan
-- that stops at the limit whatever the row estimates say: otherwise a big
-- window could be re-read whole for every batch. Both branches are ordered
-- the same way, so the union is a merge, never a sort; jit is off as a
-- backstop (a disabled sort is priced at 1e10, which would JIT every call).
create function :KEYQ_SCHEMA.window_array(
  qid int, s1 pg_snapshot, s2 pg_snapshot, a_txid xid8, a_id bigint, max_rows int, prepare boolean default true
) returns :KEYQ_SCHEMA.event[]
language plpgsql volatile
set search_path = pg_catalog, pg_temp
set enable_sort = off
set enable_seqscan = off
set jit = off
set plan_cache_mode = force_generic_plan
as $$
declare evs :KEYQ_SCHEMA.event[];
begin
  -- The queue's own partition by name (see has_pending), prepared once a session (prepared_call).
  -- The array is built by the statement itself: its aggregate reads the
  -- ordered, limited rows as they come, with no set of rows handed over and
  -- sorted again (measured: a plain batch's read of 1,000 events, 1.50 ->
  -- 1.23 ms); row(r.*)::event types them as the table's rows, not records
  -- converted through text.
  execute :KEYQ_SCHEMA.prepared_call(
    format('select pg_catalog.array_agg(row(r.*)::%I.event) from (%s) r', :KEYQ_SCHEMA_NAME, :KEYQ_SCHEMA.window_range_sql(qid)),
  'pg_snapshot, pg_snapshot, xid8, bigint, int', array[s1::text, s2::text, a_txid::text, a_id::text, max_rows::text], prepare)
    into evs;
  return evs;
end $$;

-- window_array's events as rows.
create function :KEYQ_SCHEMA.window_events(
  qid int, s1 pg_snapshot, s2 pg_snapshot, a_txid xid8, a_id bigint, max_rows int, prepare boolean default true
) returns setof :KEYQ_SCHEMA.event
language sql volatile
set search_path = pg_catalog, pg_temp
as $$
  select * from unnest(:KEYQ_SCHEMA.window_array(qid, s1, s2, a_txid, a_id, max_rows, prepare))
$$;

-- How many events window (s1, s2] holds, counting at most max_rows (null: all):
-- status() counts real events (sequence values also go to deduplicated and
-- rolled-back sends). The same two range scans of the (ev_txid, ev_id) index
-- as window_events, without the rows.
create function :KEYQ_SCHEMA.window_count(qid int, s1 pg_snapshot, s2 pg_snapshot, max_rows bigint default null,
                                          prepare boolean default true)
returns bigint
language plpgsql volatile
set search_path = pg_catalog, pg_temp
set enable_seqscan = off
set jit = off
set plan_cache_mode = force_generic_plan
as $$
declare n bigint;
begin
  -- The queue's own partition by name (see has_pending).
  execute :KEYQ_SCHEMA.prepared_call(format($q$
  select pg_catalog.count(*) from (
    (select 1 from %1$I.%2$I e
      where e.ev_txid = any (array(select x from pg_catalog.pg_snapshot_xip($1) x where pg_catalog.pg_visible_in_snapshot(x, $2))))
    union all
    (select 1 from %1$I.%2$I e
      where e.ev_txid >= pg_catalog.pg_snapshot_xmax($1) and e.ev_txid < pg_catalog.pg_snapshot_xmax($2)
        and pg_catalog.pg_visible_in_snapshot(e.ev_txid, $2))
    limit $3) w $q$, :KEYQ_SCHEMA_NAME, 'event_' || qid),
    'pg_snapshot, pg_snapshot, bigint', array[s1::text, s2::text, max_rows::text], prepare)
    into n;
  return n;
end $$;

-- One event of queue qid by (txid, id), or a row of nulls when it is gone
-- (rotated away). The queue's partition by name (see has_pending).
create function :KEYQ_SCHEMA.event_row(qid int, txid xid8, id bigint) returns :KEYQ_SCHEMA.event
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare e :KEYQ_SCHEMA.event;
begin
  execute format('select * from %I.%I where ev_txid = $1 and ev_id = $2', :KEYQ_SCHEMA_NAME, 'event_' || qid)
    into e using txid, id;
  return e;
end $$;

create function :KEYQ_SCHEMA.event_json(e :KEYQ_SCHEMA.event, retry int default 0) returns jsonb
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
begin
  return jsonb_build_object('id', e.ev_id::text, 'txid', e.ev_txid::text, 'type', e.ev_type,
                              'key', e.ev_key, 'payload', e.ev_data, 'time', e.ev_time, 'retry', retry,
                              'trace', e.ev_trace);
end $$;

-- Consumers -------------------------------------------------------------------

-- An ordered consumer needs the slot index for its N (an exclusive one the
-- index for its bucket count): when a ring table can
-- only be indexed concurrently, nothing is created and the answer lists the
-- statements the client runs (outside a transaction) before calling again.
--
-- start: where a new consumer begins (07_positions.sql, resolve_position):
-- null or {"latest": true} (what commits after this call returns),
-- {"earliest": true}, {"time": iso}, {"id": "…"}. Ignored when the consumer
-- exists (a subscribe never moves a cursor; seek does).
create function :KEYQ_SCHEMA.subscribe(queue text, consumer text, kind text default 'plain',
                                       slots int default 1, settings jsonb default '{}',
                                       index_inline boolean default false,
                                       start jsonb default null) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('consume', queue, consumer);
declare
  q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue);
  c :KEYQ_SCHEMA.consumer;
  pos record;
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
    if kind = 'exclusive' then
      -- Whether the bucket count was set (honoured as it is) or grows
      -- (09_growth.sql) is fixed when the consumer is created, like the count.
      settings := settings - 'buckets';
      if c.settings ? 'buckets' then
        settings := settings || jsonb_build_object('buckets', c.settings->'buckets');
      end if;
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
  -- A consume grant confirms an existing consumer; creating one is an operator's.
  perform :KEYQ_SCHEMA.authorize('create consumers');
  -- Maintenance skips the queue until this commits: with no cursor yet,
  -- tick pruning would otherwise delete the start tick read below, and the
  -- first window would read from a missing snapshot (nothing, silently).
  perform pg_advisory_xact_lock(:KEYQ_SCHEMA.lock_key('maintain', q.queue_id));
  if kind in ('ordered', 'exclusive') then
    -- An exclusive consumer reads its key buckets through the slot index for its bucket count.
    pending := :KEYQ_SCHEMA.ensure_slot_index(q.queue_id,
                 case kind when 'ordered' then slots
                   else coalesce((settings->>'buckets')::int, :KEYQ_SCHEMA.xbuckets()) end, index_inline);
    if pending is not null then
      return pending || jsonb_build_object('created', false);
    end if;
  end if;
  -- The start position is resolved after the index work, in this transaction
  -- (a position outside the retained range fails here, before any write).
  pos := :KEYQ_SCHEMA.resolve_position(q, coalesce(nullif(start, 'null'::jsonb), '{"latest": true}'));
  insert into :KEYQ_SCHEMA.consumer (queue_id, consumer_name, kind, slots, settings)
  values (q.queue_id, consumer, kind, slots, settings) returning * into c;
  insert into :KEYQ_SCHEMA.cursor (consumer_id, slot, tick_id, polled_at)
  select c.consumer_id, s, pos.tick_id, now() from generate_series(0, slots - 1) s;
  perform :KEYQ_SCHEMA.place_cursors(c, null, pos.tick_id, pos.end_tick_id, pos.last_txid, pos.last_id);
  return jsonb_build_object('created', true,
    'position', :KEYQ_SCHEMA.position_json(q, pos.tick_id, pos.end_tick_id, pos.last_id));
end $$;

create function :KEYQ_SCHEMA.unsubscribe(queue text, consumer text) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('unsubscribe consumers');
declare q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue); n int;
begin
  delete from :KEYQ_SCHEMA.consumer k where k.queue_id = q.queue_id and k.consumer_name = consumer;
  get diagnostics n = row_count;
  return jsonb_build_object('removed', n > 0);
end $$;

-- Maintenance -----------------------------------------------------------------

-- Whether ring table t of queue qid holds an event the snapshot does not see
-- (a cursor has not passed it). The table by name (see has_pending).
create function :KEYQ_SCHEMA.table_unread(qid int, t int, snap pg_snapshot) returns boolean
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
declare unread boolean;
begin
  execute format($q$
    select exists (select 1 from %1$I.%2$I e
                    where e.ev_txid >= pg_catalog.pg_snapshot_xmax($1)
                       or e.ev_txid = any (array(select pg_catalog.pg_snapshot_xip($1)))) $q$,
    :KEYQ_SCHEMA_NAME, 'event_' || qid || '_' || t)
    into unread using snap;
  return unread;
end $$;

-- Switches the queue to its next ring table after emptying it. Safe because:
-- the ACCESS EXCLUSIVE lock waits out every transaction that inserted into
-- that table (they hold ROW EXCLUSIVE until they end), and the table is only
-- truncated when the least advanced cursor's snapshot sees all its rows.
create function :KEYQ_SCHEMA.rotate(queue text, force boolean default false) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize(case when force then 'force rotation' else 'housekeep' end, queue);
declare
  q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue);
  nxt smallint := (q.cur_table + 1) % q.ntables;
  oldest pg_snapshot;
  floor bigint;
  prev_timeout text := current_setting('lock_timeout');
begin
  if not force and now() - q.rotated_at < q.rotation_period then
    return jsonb_build_object('rotated', false, 'reason', 'not due');
  end if;
  -- Retention is a floor for rotation, forced or not: table nxt stopped being
  -- current at left_at, so its newest event is at least that old.
  if q.retention is not null and q.left_at[nxt + 1] > now() - q.retention then
    return jsonb_build_object('rotated', false, 'reason', 'retention',
                              'until', q.left_at[nxt + 1] + q.retention);
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
  if oldest is not null and :KEYQ_SCHEMA.table_unread(q.queue_id, nxt, oldest) then
    return jsonb_build_object('rotated', false, 'reason', 'lagging consumer');
  end if;
  -- The retained range starts at the oldest tick that sees every row of nxt
  -- (every event after it stays in the log). A row no tick sees yet (its
  -- transaction committed after the newest tick) waits for the next tick.
  floor := :KEYQ_SCHEMA.floor_after(q, nxt);
  if floor is null then
    return jsonb_build_object('rotated', false, 'reason', 'unticked');
  end if;
  execute format('truncate %I.%I', :KEYQ_SCHEMA_NAME, 'event_' || q.queue_id || '_' || nxt);
  update :KEYQ_SCHEMA.queue set cur_table = nxt, rotated_at = now(), floor_tick = floor,
         left_at[q.cur_table + 1] = now()
   where queue_id = q.queue_id;
  return jsonb_build_object('rotated', true, 'table', nxt);
end $$;

-- The oldest tick (from the queue's floor on) whose snapshot sees every row
-- of ring table t: ticks are monotonic, so a binary search over them, one
-- index probe each. Null when even the newest tick misses a row.
create function :KEYQ_SCHEMA.floor_after(q :KEYQ_SCHEMA.queue, t smallint) returns bigint
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  ids bigint[] := array(select tick_id from :KEYQ_SCHEMA.tick
                         where queue_id = q.queue_id and tick_id >= coalesce(q.floor_tick, 0) order by tick_id);
  lo int := 1;
  hi int := cardinality(ids);
  mid int;
  sees boolean;
begin
  -- The ring table by name (see has_pending), never the parent.
  execute format('select exists (select 1 from %I.%I)', :KEYQ_SCHEMA_NAME, 'event_' || q.queue_id || '_' || t) into sees;
  if not sees then
    return coalesce(q.floor_tick, ids[1]);
  end if;
  if hi = 0 then return null; end if;
  -- Invariant: ids[hi + 1] (if any) sees every row; find the first that does.
  hi := hi + 1;
  while lo < hi loop
    mid := (lo + hi) / 2;
    select not :KEYQ_SCHEMA.table_unread(q.queue_id, t, k.tick_snapshot)
      into sees
      from :KEYQ_SCHEMA.tick k where k.queue_id = q.queue_id and k.tick_id = ids[mid];
    if sees then hi := mid; else lo := mid + 1; end if;
  end loop;
  return ids[lo];  -- null when lo is past the newest tick
end $$;

-- Drops ticks no cursor needs any more (all but the newest one before the
-- oldest cursor position, so a new subscriber still has a start). With a
-- retention, every tick of the retained range (from the floor on) stays:
-- they are the start positions of from/seek.
create function :KEYQ_SCHEMA.prune_ticks(qid int) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare keep bigint; n int; q :KEYQ_SCHEMA.queue;
begin
  select * into q from :KEYQ_SCHEMA.queue where queue_id = qid;
  -- Cursors by consumer, looked up by its key (offset 0 keeps it a
  -- parameterized scan), so the work is this queue's rows, not every cursor
  -- of the schema (maintain() runs this for every queue).
  select min(cu.tick_id) into keep
    from :KEYQ_SCHEMA.consumer k
    cross join lateral (select x.tick_id from :KEYQ_SCHEMA.cursor x where x.consumer_id = k.consumer_id offset 0) cu
   where k.queue_id = qid;
  if keep is null then
    select max(tick_id) into keep from :KEYQ_SCHEMA.tick where queue_id = qid;
  end if;
  if q.retention is not null then
    keep := least(keep, q.floor_tick);
  end if;
  delete from :KEYQ_SCHEMA.tick where queue_id = qid and tick_id < keep;
  get diagnostics n = row_count;
  return n;
end $$;
