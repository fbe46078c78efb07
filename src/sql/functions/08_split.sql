-- keyq engine, part 8: cutting Tier A buckets into pieces (see
-- 03_exclusive.sql). Called by prepare_exclusive, in the planner's short
-- transaction.

-- The positions i (1-based, before the last) of evs after which a cut is
-- key-safe within evs: no key of events 1..i has an event after i.
create function :KEYQ_SCHEMA.key_safe_cuts(evs :KEYQ_SCHEMA.event[]) returns int[]
language plpgsql immutable
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_column
begin
  return (
    select coalesce(array_agg(i order by i), '{}')
      from (select i, max(reach) over (order by i) as reach
              from (select i, case when (evs[i]).ev_key is null then i
                                   else max(i) over (partition by (evs[i]).ev_key) end as reach
                      from generate_subscripts(evs, 1) i) l) r
     where reach = i and i < cardinality(evs));
end $$;

-- Cuts each free chunk of c that is alone in its bucket and holds more
-- events than one batch (size events) into pieces, so that whatever a batch
-- claims it reads whole: a slow batch then holds only its own piece, and the
-- rest of its bucket flows to other workers at once (a batch cannot hand
-- over the unread rest of a chunk it holds: nothing it writes is seen before
-- it commits). Cuts are key-safe: a cut falls only where no key of the
-- events before it has events after it, so no key lies in two pieces and
-- concurrent pieces never contend. A piece holds as many whole key runs as
-- fit in size events (one run longer than that is a piece of its own, read
-- in part: its rest waits only when its own keys do). The chunk keeps its
-- first piece (it ends at upto); each further piece starts where the one
-- before ended. Reads at most 8 batches' worth of events per chunk: the
-- last piece then holds the rest, cut again when the pieces before it are
-- gone (a key of an earlier piece may have events in it; the key lock keeps
-- them apart). Runs in the planner's transaction, under its lock; a chunk a
-- batch holds is skipped (SKIP LOCKED), and only chunks to cut are locked.
create function :KEYQ_SCHEMA.split_chunks(c :KEYQ_SCHEMA.consumer, size int) returns int
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare
  ch :KEYQ_SCHEMA.chunk;
  evs :KEYQ_SCHEMA.event[];
  cuts int[];
  got int;
  pos int;
  nxt int;
  n int := 0;
  win bigint[];
  small boolean;
begin
  if size is null or size < 1 then
    return 0;
  end if;
  for ch in
    select * from :KEYQ_SCHEMA.chunk k
     where k.consumer_id = c.consumer_id and k.upto_txid is null
       and k.cut_seen_tick is distinct from k.end_tick  -- left whole at this tick already
       and not exists (select 1 from :KEYQ_SCHEMA.chunk o
                        where o.consumer_id = k.consumer_id and o.chunk_id <> k.chunk_id
                          and o.bucket % least(o.nbuckets, k.nbuckets) = k.bucket % least(o.nbuckets, k.nbuckets))
     order by k.start_tick, k.end_tick, k.chunk_id
  loop
    -- A chunk is part of its window: when the whole window holds at most
    -- size events (counted once per window, not read once per bucket), none
    -- of its chunks needs a cut.
    if win is distinct from array[ch.start_tick, ch.end_tick] then
      win := array[ch.start_tick, ch.end_tick];
      small := :KEYQ_SCHEMA.window_count(c.queue_id,
                 (select tick_snapshot from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = ch.start_tick),
                 (select tick_snapshot from :KEYQ_SCHEMA.tick where queue_id = c.queue_id and tick_id = ch.end_tick),
                 size + 1) <= size;
    end if;
    continue when small;
    -- A look at two batches' worth first: a cut within them in the longer
    -- view is one in this view too (a key can only reach further), so a
    -- bucket whose keys interleave from its start is left whole after
    -- reading 2 * size + 1 events, not 8 * size + 1.
    evs := :KEYQ_SCHEMA.chunk_events(c, ch, 2 * size + 1);
    got := cardinality(evs);
    cuts := case when got <= size then '{}'::int[] else :KEYQ_SCHEMA.key_safe_cuts(evs) end;
    if got > 2 * size and cardinality(cuts) > 0 then
      evs := :KEYQ_SCHEMA.chunk_events(c, ch, 8 * size + 1);
      got := cardinality(evs);
      cuts := :KEYQ_SCHEMA.key_safe_cuts(evs);
    end if;
    -- Only a chunk to cut or to mark is locked (a batch may claim the others
    -- meanwhile), and only when no batch holds it and it is still as read.
    perform 1 from :KEYQ_SCHEMA.chunk k
      where k.consumer_id = c.consumer_id and k.chunk_id = ch.chunk_id and k.end_tick = ch.end_tick
        and k.after_txid = ch.after_txid and k.after_id = ch.after_id and k.upto_txid is null
        -- and not recut meanwhile into another bucket count (a growing planner
        -- commits between this read and this lock: this call does not hold
        -- the planning lock when another worker plans; cutting by the stale
        -- count made pieces that overlapped the recut chunks: events twice)
        and k.bucket = ch.bucket and k.nbuckets = ch.nbuckets
      for update skip locked;
    continue when not found;
    if got <= size or cardinality(cuts) = 0 then
      -- Left whole: not read again until it grows to a later tick.
      update :KEYQ_SCHEMA.chunk set cut_seen_tick = ch.end_tick
       where consumer_id = c.consumer_id and chunk_id = ch.chunk_id;
      continue;
    end if;
    pos := 0;
    loop
      -- The furthest cut within one batch, else the first one past it.
      nxt := coalesce((select max(x) from unnest(cuts) x where x > pos and x <= pos + size),
                      (select min(x) from unnest(cuts) x where x > pos));
      exit when nxt is null;
      if pos = 0 then
        update :KEYQ_SCHEMA.chunk set upto_txid = evs[nxt].ev_txid, upto_id = evs[nxt].ev_id
         where consumer_id = c.consumer_id and chunk_id = ch.chunk_id;
      else
        insert into :KEYQ_SCHEMA.chunk (consumer_id, chunk_id, start_tick, end_tick, after_txid, after_id, bucket, nbuckets, upto_txid, upto_id)
        values (c.consumer_id, nextval(':KEYQ_SCHEMA.chunk_id_seq'), ch.start_tick, ch.end_tick,
                evs[pos].ev_txid, evs[pos].ev_id, ch.bucket, ch.nbuckets, evs[nxt].ev_txid, evs[nxt].ev_id);
      end if;
      pos := nxt;
      n := n + 1;
    end loop;
    if pos > 0 then  -- the rest after the last cut, to the window's end
      insert into :KEYQ_SCHEMA.chunk (consumer_id, chunk_id, start_tick, end_tick, after_txid, after_id, bucket, nbuckets)
      values (c.consumer_id, nextval(':KEYQ_SCHEMA.chunk_id_seq'), ch.start_tick, ch.end_tick, evs[pos].ev_txid, evs[pos].ev_id, ch.bucket, ch.nbuckets);
      n := n + 1;
    end if;
  end loop;
  return n;
end $$;
