-- keyq engine, part 5: status for operators and alerts, and a ticker for
-- every queue (for a pg_cron schedule; never required).

-- Per queue: tables and rotation, the last tick and its age, events
-- committed since it; per consumer and slot: lag (events and seconds), last
-- poll, retries, dead letters, blocked keys. Event counts are real events
-- (sequence values also go to deduplicated and rolled-back sends), counted
-- through the (ev_txid, ev_id) index once per distinct cursor tick, at most
-- 100,000 each so a status call stays cheap behind any backlog.
-- A slot not polled for stale_after seconds is flagged: it pins rotation.
-- The retained range of a queue: its first tick (the floor, where
-- from: "earliest" starts) and that tick's time, the first event after it,
-- the events after it (counted up to 100,000) and the ring tables' bytes.
create function :KEYQ_SCHEMA.retained_json(q :KEYQ_SCHEMA.queue) returns jsonb
language plpgsql stable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  f :KEYQ_SCHEMA.tick;
  first :KEYQ_SCHEMA.event;
  bytes bigint;
begin
  select * into f from :KEYQ_SCHEMA.tick t where t.queue_id = q.queue_id and t.tick_id = :KEYQ_SCHEMA.floor_of(q);
  select * into first from :KEYQ_SCHEMA.window_events(q.queue_id, f.tick_snapshot, pg_current_snapshot(), '0'::xid8, 0, 1);
  select sum(pg_total_relation_size(format('%I.%I', :KEYQ_SCHEMA_NAME, 'event_' || q.queue_id || '_' || i)::regclass))
    into bytes from generate_series(0, q.ntables - 1) i;
  return jsonb_build_object(
    'fromTick', f.tick_id::text, 'since', f.tick_time,
    'oldestEventId', first.ev_id::text, 'oldestEventTime', first.ev_time,
    'events', :KEYQ_SCHEMA.window_count(q.queue_id, f.tick_snapshot, pg_current_snapshot(), 100000),
    'bytes', bytes);
end $$;

create function :KEYQ_SCHEMA.status(queue text default null, stale_after float8 default 300) returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select :KEYQ_SCHEMA.authorize('see', queue) where queue is not null;
  with qs as materialized (
    select q.*, lt.tick_id as last_tick, lt.tick_time as last_time,
           :KEYQ_SCHEMA.window_count(q.queue_id, lt.tick_snapshot, pg_current_snapshot(), 100000) as pending
      from :KEYQ_SCHEMA.queue q
      left join lateral (select * from :KEYQ_SCHEMA.tick t where t.queue_id = q.queue_id
                          order by t.tick_id desc limit 1) lt on true
     where (status.queue is null or q.queue_name = status.queue)
       and :KEYQ_SCHEMA.permits('see', q.queue_name)
  ), lag as materialized (
    select t.queue_id, t.tick_id,
           :KEYQ_SCHEMA.window_count(t.queue_id, t.tick_snapshot, pg_current_snapshot(), 100000) as n
      from :KEYQ_SCHEMA.tick t
     where t.queue_id in (select queue_id from qs)
       and t.tick_id in (select cu.tick_id from :KEYQ_SCHEMA.cursor cu
                           join :KEYQ_SCHEMA.consumer c on c.consumer_id = cu.consumer_id
                          where c.queue_id = t.queue_id)
  )
  select coalesce(jsonb_agg(jsonb_build_object(
    'queue', q.queue_name,
    'tables', q.ntables, 'currentTable', q.cur_table, 'rotatedAt', q.rotated_at,
    'lastTick', q.last_tick::text, 'lastTickAge', extract(epoch from now() - q.last_time),
    'eventsSinceTick', coalesce(q.pending, 0),
    'retention', extract(epoch from q.retention),
    'retained', :KEYQ_SCHEMA.retained_json((select x from :KEYQ_SCHEMA.queue x where x.queue_id = q.queue_id)),
    'consumers', coalesce((
      select jsonb_agg(jsonb_build_object(
        'name', c.consumer_name, 'kind', c.kind, 'slots', c.slots, 'paused', c.paused_at is not null,
        'retries', (select count(*) from :KEYQ_SCHEMA.retry r where r.consumer_id = c.consumer_id),
        'deadLetters', (select count(*) from :KEYQ_SCHEMA.dead_letter d where d.consumer_id = c.consumer_id),
        'blockedKeys', (select count(*) from :KEYQ_SCHEMA.blocked b where b.consumer_id = c.consumer_id),
        'cursors', (select jsonb_agg(jsonb_build_object(
            'slot', cu.slot,
            'lagEvents', coalesce(l.n, 0),
            'lagSeconds', extract(epoch from now() - t.tick_time),
            'polledAgo', extract(epoch from now() - cu.polled_at),
            'stale', cu.polled_at < now() - make_interval(secs => stale_after),
            'windowOpen', cu.end_tick_id is not null) order by cu.slot)
          from :KEYQ_SCHEMA.cursor cu
          join :KEYQ_SCHEMA.tick t on t.queue_id = q.queue_id and t.tick_id = cu.tick_id
          left join lag l on l.queue_id = q.queue_id and l.tick_id = cu.tick_id
          where cu.consumer_id = c.consumer_id)) order by c.consumer_name)
      from :KEYQ_SCHEMA.consumer c where c.queue_id = q.queue_id
       and :KEYQ_SCHEMA.permits('consume', q.queue_name, c.consumer_name)), '[]')
  ) order by q.queue_name), '[]')
  from qs q
$$;

-- Ticks every queue by its policy, for a pg_cron schedule (each call is its
-- own transaction, as the ticker needs):
--   select cron.schedule('keyq-ticker', '1 second', 'select keyq.tick_all()');
create function :KEYQ_SCHEMA.tick_all() returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('tick every queue');
declare q text; out jsonb := '{}';
begin
  for q in select queue_name from :KEYQ_SCHEMA.queue order by queue_name loop
    out := out || jsonb_build_object(q, :KEYQ_SCHEMA.tick(q)->'tick');
  end loop;
  return out;
end $$;
