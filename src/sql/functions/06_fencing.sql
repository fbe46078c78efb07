-- keyq engine, part 6: fencing (consumer option `fenced`). A fenced batch
-- takes a lease on its keys (Tier A) or its slot (Tier B) in a short
-- transaction of its own, committed before any handler starts, so the lease
-- outlives the batch's session: when that session dies while a handler still
-- runs, no other worker takes the key or slot before the lease's end (the
-- batch's deadline). The batch's commit clears it. Consumers that are not
-- fenced never read or write this table.

-- Leases keys of consumer slot `slot` to holder for lease_ms milliseconds, in the
-- caller's own (autocommit) transaction. Returns the keys another holder's
-- live lease still fences; those are not leased and must not be handled.
create function :KEYQ_SCHEMA.fence(queue text, consumer text, slot int, keys text[], holder text, lease_ms float8) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('consume', queue, consumer);
declare
  c :KEYQ_SCHEMA.consumer := :KEYQ_SCHEMA.get_consumer(queue, consumer);
  taken text[];
begin
  -- A key is taken when its lease could be neither inserted nor renewed.
  with want as (select k, hashtextextended(k, 0) as h from unnest(keys) k),
  got as (
    insert into :KEYQ_SCHEMA.lease as l (consumer_id, slot, key_hash, holder, until)
    select distinct c.consumer_id, slot, w.h, holder, clock_timestamp() + make_interval(secs => lease_ms / 1000) from want w
    -- lease_pkey is (consumer_id, slot, key_hash); a column list would read `slot` as the argument.
    on conflict on constraint lease_pkey do update set holder = excluded.holder, until = excluded.until
     where l.until <= clock_timestamp() or l.holder = excluded.holder
    returning l.key_hash
  )
  select coalesce(array_agg(distinct w.k), '{}') into taken
    from want w where w.h not in (select key_hash from got);
  return to_jsonb(taken);
end $$;

-- Clears holder's leases; called inside the batch, so they end with its commit.
create function :KEYQ_SCHEMA.unfence(queue text, consumer text, holder text) returns jsonb
language sql
set search_path = pg_catalog, pg_temp
as $$
  select :KEYQ_SCHEMA.authorize('consume', queue, consumer);
  with gone as (
    delete from :KEYQ_SCHEMA.lease
     where consumer_id = (:KEYQ_SCHEMA.get_consumer(queue, consumer)).consumer_id and lease.holder = unfence.holder
    returning 1
  )
  select to_jsonb(count(*)::int) from gone
$$;
