-- keyq engine, part 5: status for operators and alerts, and a ticker for
-- every queue (for a pg_cron schedule; never required).

-- Per queue: tables and rotation, the last tick and its age, events
-- committed since it; per consumer and slot: lag (events and seconds), last
-- poll, retries, dead letters, blocked keys. Event counts are real events
-- (sequence values also go to deduplicated and rolled-back sends), counted
-- through the (ev_txid, ev_id) index once per distinct cursor tick, at most
-- 100,000 each so a status call stays cheap behind any backlog.
-- A slot not polled for stale_after seconds is flagged: it pins rotation.
-- A page of queues: those named after after_queue, at most max_queues of
-- them (null: every queue). Every queue reported opens its own partitions
-- and keeps them locked until the transaction ends, so one statement over a
-- thousand queues could fill the server's lock table (max_locks_per_transaction
-- × connections); the client reads status page by page, each its own
-- statement.
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
  select * into first from :KEYQ_SCHEMA.window_events(q.queue_id, f.tick_snapshot, pg_current_snapshot(), '0'::xid8, 0, 1, false);
  select sum(pg_total_relation_size(format('%I.%I', :KEYQ_SCHEMA_NAME, 'event_' || q.queue_id || '_' || i)::regclass))
    into bytes from generate_series(0, q.ntables - 1) i;
  return jsonb_build_object(
    'fromTick', f.tick_id::text, 'since', f.tick_time,
    'oldestEventId', first.ev_id::text, 'oldestEventTime', first.ev_time,
    'events', :KEYQ_SCHEMA.window_count(q.queue_id, f.tick_snapshot, pg_current_snapshot(), 100000, false),
    'bytes', bytes);
end $$;

create function :KEYQ_SCHEMA.status(queue text default null, stale_after float8 default 300,
                                    after_queue text default null, max_queues int default null) returns jsonb
language sql stable
set search_path = pg_catalog, pg_temp
as $$
  select :KEYQ_SCHEMA.authorize('see', queue) where queue is not null;
  with qs as materialized (
    select q.*, lt.tick_id as last_tick, lt.tick_time as last_time,
           :KEYQ_SCHEMA.window_count(q.queue_id, lt.tick_snapshot, pg_current_snapshot(), 100000, false) as pending
      -- One queue by name, or a page in name order: both read the queue_name
      -- index, so a page costs its own queues, not the whole queue table.
      from (select * from :KEYQ_SCHEMA.queue q1
             where q1.queue_name = status.queue and :KEYQ_SCHEMA.permits('see', q1.queue_name)
            union all
            (select * from :KEYQ_SCHEMA.queue q2
              where status.queue is null and q2.queue_name > coalesce(status.after_queue, '')
                and :KEYQ_SCHEMA.permits('see', q2.queue_name)
              order by q2.queue_name
              limit status.max_queues)) q
      left join lateral (select * from :KEYQ_SCHEMA.tick t where t.queue_id = q.queue_id
                          order by t.tick_id desc limit 1) lt on true
  ), lag as materialized (
    -- The distinct cursor ticks of the reported queues, each counted once:
    -- consumers by queue and cursors by consumer, looked up by their keys
    -- (offset 0 keeps each lookup a parameterized scan of its own), so the
    -- work is the reported queues' rows, never every cursor of the schema.
    select d.queue_id, d.tick_id,
           :KEYQ_SCHEMA.window_count(d.queue_id, t.tick_snapshot, pg_current_snapshot(), 100000, false) as n
      from (select distinct qs.queue_id, cu.tick_id
              from qs
              cross join lateral (select k.consumer_id from :KEYQ_SCHEMA.consumer k where k.queue_id = qs.queue_id offset 0) c
              cross join lateral (select x.tick_id from :KEYQ_SCHEMA.cursor x where x.consumer_id = c.consumer_id offset 0) cu) d
      cross join lateral (select k.tick_snapshot from :KEYQ_SCHEMA.tick k
                           where k.queue_id = d.queue_id and k.tick_id = d.tick_id offset 0) t
  )
  select coalesce(jsonb_agg(jsonb_build_object(
    'queue', q.queue_name,
    'tables', q.ntables, 'currentTable', q.cur_table, 'rotatedAt', q.rotated_at,
    'lastTick', q.last_tick::text, 'lastTickAge', extract(epoch from now() - q.last_time),
    'eventsSinceTick', coalesce(q.pending, 0),
    'retention', extract(epoch from q.retention),
    'retained', :KEYQ_SCHEMA.retained_json(qx.x),
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
  cross join lateral (select x from :KEYQ_SCHEMA.queue x where x.queue_id = q.queue_id offset 0) qx
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
