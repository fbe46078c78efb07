-- keyq engine, part 4: Tier B, the ordered consumer. N fixed slots per
-- (queue, consumer); key K always maps to slot_of(K, N); each slot is its own
-- cursor, read by one worker at a time, FIFO within a key.
--
-- Read amplification: an expression index on (slot_of(ev_key, N), ev_txid,
-- ev_id) is built on the queue's log for each persisted N, so a slot reads
-- its own rows only instead of the whole stream.

-- (hashtextextended(K, 0) % N + N) % N, sign-safe; a null key goes to slot 0.
-- Immutable and without a SET clause so it inlines and matches the index.
create function :KEYQ_SCHEMA.slot_of(key text, n int) returns int
language sql immutable parallel safe
as $$ select coalesce(((pg_catalog.hashtextextended(key, 0) % n + n) % n)::int, 0) $$;

-- Builds the slot index for N on the queue's log unless it exists. Called
-- only when an ordered consumer is created: CREATE INDEX takes a SHARE lock.
create function :KEYQ_SCHEMA.ensure_slot_index(qid int, n int) returns void
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare idx text := 'event_' || qid || '_slots' || n;
begin
  if to_regclass(format('%I.%I', :KEYQ_SCHEMA_NAME, idx)) is null then
    execute format('create index %I on %I.%I (%I.slot_of(ev_key, %s), ev_txid, ev_id)',
                   idx, :KEYQ_SCHEMA_NAME, 'event_' || qid, :KEYQ_SCHEMA_NAME, n);
  end if;
end $$;

-- window_events restricted to slot k of n, reading only the slot's rows:
-- the range is written as row comparisons led by the slot expression, which
-- only the slot index can serve, and sorting is off so the plan is an
-- ordered index scan that stops at the limit. Neither depends on row
-- estimates (xid8 ranges are estimated badly, and fresh tables have no
-- statistics). N is spliced as an integer literal so the index matches.
create function :KEYQ_SCHEMA.window_events_slot(
  qid int, s1 pg_snapshot, s2 pg_snapshot, a_txid xid8, a_id bigint, lim int, n int, k int
) returns setof :KEYQ_SCHEMA.event
language plpgsql stable
set search_path = pg_catalog, pg_temp
set enable_sort = off
set enable_seqscan = off
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
  range_sql text;
begin
  if (a_txid, a_id) < (pg_snapshot_xmax(s1), 0::bigint) then
    lo_txid := pg_snapshot_xmax(s1);
    lo_id := 0;
  end if;
  range_sql := format($q$
      (select e.* from %1$I.event e
        where e.queue_id = $1
          and (%1$I.slot_of(e.ev_key, %2$s), e.ev_txid, e.ev_id) > ($7, $8, $9)
          and (%1$I.slot_of(e.ev_key, %2$s), e.ev_txid, e.ev_id) < ($7, pg_snapshot_xmax($3), 0::bigint)
          and pg_visible_in_snapshot(e.ev_txid, $3)
        order by %1$I.slot_of(e.ev_key, %2$s), e.ev_txid, e.ev_id limit $6) $q$, :KEYQ_SCHEMA_NAME, n::int);
  if cardinality(strag) = 0 then
    return query execute range_sql using qid, s1, s2, a_txid, a_id, lim, k, lo_txid, lo_id;
    return;
  end if;
  return query execute format($q$
    select w.* from (
      (select e.* from %1$I.event e
        where e.queue_id = $1 and e.ev_txid = any ($10) and %1$I.slot_of(e.ev_key, %2$s) + 0 = $7
          and (e.ev_txid, e.ev_id) > ($4, $5)
        order by e.ev_txid, e.ev_id limit $6)
      union all
      %3$s
    ) w order by w.ev_txid, w.ev_id limit $6 $q$, :KEYQ_SCHEMA_NAME, n::int, range_sql)
  using qid, s1, s2, a_txid, a_id, lim, k, lo_txid, lo_id, strag;
end $$;

-- Pause policy (G3): a compact marker per blocked key. While it exists, later
-- events of the key wait in the retry rows as held rows (due 'infinity',
-- retry count untouched); acking or dead-lettering the head releases them.
create table :KEYQ_SCHEMA.blocked (
  consumer_id int not null references :KEYQ_SCHEMA.consumer on delete cascade,
  slot        int not null,
  ev_key      text not null,
  head_id     bigint not null,
  since       timestamptz not null default now(),
  primary key (consumer_id, slot, ev_key)
);

-- Blocks key k of slot s behind its failed head (pause); holds the key's other
-- pending retry rows too, so nothing of the key overtakes the head.
create function :KEYQ_SCHEMA.block_key(c :KEYQ_SCHEMA.consumer, s int, k text, head bigint) returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
  insert into :KEYQ_SCHEMA.blocked (consumer_id, slot, ev_key, head_id)
  values (c.consumer_id, s, k, head)
  on conflict (consumer_id, slot, ev_key) do update set head_id = excluded.head_id;
  update :KEYQ_SCHEMA.retry set due_at = 'infinity'
   where consumer_id = c.consumer_id and slot = s and ev_key = k and ev_id <> head and due_at <> 'infinity';
$$;

-- Releases the keys whose head is one of ids (acked or dead-lettered): their
-- held rows become due now and go out in original (txid, id) order.
create function :KEYQ_SCHEMA.release_heads(c :KEYQ_SCHEMA.consumer, s int, ids bigint[]) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare n int;
begin
  with freed as (
    delete from :KEYQ_SCHEMA.blocked b
     where b.consumer_id = c.consumer_id and b.slot = s and b.head_id = any (ids)
    returning b.ev_key
  )
  update :KEYQ_SCHEMA.retry r set due_at = now()
    from freed
   where r.consumer_id = c.consumer_id and r.slot = s and r.ev_key = freed.ev_key and r.due_at = 'infinity';
  get diagnostics n = row_count;
  return n;
end $$;

-- One batch of an ordered consumer. Tries the slots in `slots` order (then,
-- when help_after is given, any slot not polled for that many seconds):
-- try-lock (skip a slot another worker holds), then the cursor row lock —
-- the backstop: a caller that skips the try-lock blocks, never duplicates.
-- An empty slot still has its window closed, so no slot pins rotation. The
-- first slot with events is returned; with pause, events of blocked keys are
-- held instead of returned.
create function :KEYQ_SCHEMA.receive_ordered(
  queue text, consumer text, slots int[], max_events int,
  help_after float8 default null, skip_try_lock boolean default false
) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer);
  cur :KEYQ_SCHEMA.cursor;
  k int;
  todo int[];
  evs jsonb;
  blocked_keys text[];
  held jsonb;
  tried int := 0;
begin
  if c.kind <> 'ordered' then
    raise exception 'Consumer "%" of queue "%" is a % consumer, not ordered; use another consumer name.', consumer, queue, c.kind
      using errcode = 'KQ003', hint = 'KEYQ:CONSUMER_KIND_MISMATCH';
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
    select * into cur from :KEYQ_SCHEMA.cursor where consumer_id = c.consumer_id and slot = k for update;
    evs := :KEYQ_SCHEMA.take_retries(c.consumer_id, k, max_events);
    evs := evs || :KEYQ_SCHEMA.read_window(c, cur, max_events - jsonb_array_length(evs));
    if c.settings->>'onFailure' = 'pause' then
      blocked_keys := array(select b.ev_key from :KEYQ_SCHEMA.blocked b where b.consumer_id = c.consumer_id and b.slot = k);
      if cardinality(blocked_keys) > 0 then
        select coalesce(jsonb_agg(e order by o), '[]') into held
          from jsonb_array_elements(evs) with ordinality as t(e, o)
         where e->>'key' = any (blocked_keys) and not coalesce((e->>'redelivered')::boolean, false);
        perform :KEYQ_SCHEMA.park_events(c, k, held, 'infinity');
        select coalesce(jsonb_agg(e order by o), '[]') into evs
          from jsonb_array_elements(evs) with ordinality as t(e, o)
         where not (e->>'key' = any (blocked_keys) and not coalesce((e->>'redelivered')::boolean, false));
      end if;
    end if;
    if jsonb_array_length(evs) > 0 then
      return jsonb_build_object('busy', false, 'slot', k, 'events', evs);
    end if;
  end loop;
  return jsonb_build_object('busy', tried = 0 and cardinality(todo) > 0, 'slot', null, 'events', '[]'::jsonb);
end $$;

-- Releases key k of slot s outright (its head was dead-lettered, possibly in
-- the same batch as its first failure, before any marker existed).
create function :KEYQ_SCHEMA.release_key(c :KEYQ_SCHEMA.consumer, s int, k text) returns void
language sql
set search_path = pg_catalog, pg_temp
as $$
  delete from :KEYQ_SCHEMA.blocked where consumer_id = c.consumer_id and slot = s and ev_key = k;
  update :KEYQ_SCHEMA.retry set due_at = now()
   where consumer_id = c.consumer_id and slot = s and ev_key = k and due_at = 'infinity';
$$;

-- Keys currently blocked by a failed head (pause policy).
create function :KEYQ_SCHEMA.blocked_keys(queue text, consumer text) returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select coalesce(jsonb_agg(jsonb_build_object(
           'slot', b.slot, 'key', b.ev_key, 'headId', b.head_id::text, 'since', b.since,
           'held', (select count(*) from :KEYQ_SCHEMA.retry r
                     where r.consumer_id = b.consumer_id and r.slot = b.slot and r.ev_key = b.ev_key
                       and r.due_at = 'infinity'))
           order by b.slot, b.ev_key), '[]')
  from :KEYQ_SCHEMA.blocked b
  where b.consumer_id = (:KEYQ_SCHEMA.get_consumer(queue, consumer)).consumer_id
$$;
