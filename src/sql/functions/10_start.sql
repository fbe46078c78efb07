-- keyq engine, part 10: the start of a run() in one statement. A run used
-- to send subscribe (a fresh client's first run), tick (or
-- prepare_exclusive) and maintain one after the other, each in its own
-- transaction: three network round trips on a cold invocation (six on a
-- driver that describes each statement before its first use on a
-- connection). start_run does the three in one short transaction, in that
-- order (the lock order of prepare_exclusive: subscribe, bucket growth,
-- tick), and answers with what each did.
--
-- subscribe: the client has not subscribed this consumer yet. An existing
-- plain or ordered consumer whose kind, slots and settings match is left
-- as it is without taking subscribe's lock (subscribe would change
-- nothing); anything else goes through subscribe(), and when that asks
-- for a slot index built concurrently (or waits for another session's
-- build) nothing else is done: the answer carries subscribe's reply and no
-- tick, and the client subscribes by itself, then calls again.
create function :KEYQ_SCHEMA.start_run(queue text, consumer text, kind text, slots int, settings jsonb,
                                       subscribe boolean, chunk_size int,
                                       grow_from int default null, index_inline boolean default false) returns jsonb
language plpgsql
set search_path = pg_catalog, pg_temp
as $$
#variable_conflict use_variable
declare authorized boolean := :KEYQ_SCHEMA.authorize('consume', queue, consumer);
declare q :KEYQ_SCHEMA.queue := :KEYQ_SCHEMA.get_queue(queue); c :KEYQ_SCHEMA.consumer; sub jsonb; t jsonb;
begin
  if subscribe then
    select * into c from :KEYQ_SCHEMA.consumer k where k.queue_id = q.queue_id and k.consumer_name = consumer;
    if not found or kind = 'exclusive' or c.kind <> kind or c.slots <> slots or c.settings is distinct from settings then
      sub := :KEYQ_SCHEMA.subscribe(queue, consumer, kind, slots, settings, false, null);
      if sub ? 'build' or sub ? 'wait' then
        return jsonb_build_object('tick', null, 'subscribe', sub);
      end if;
    end if;
  end if;
  if kind = 'exclusive' then
    t := :KEYQ_SCHEMA.prepare_exclusive(queue, consumer, chunk_size, grow_from, index_inline);
  else
    t := :KEYQ_SCHEMA.tick(queue);
    t := jsonb_build_object('tick', t->'tick', 'busy', coalesce(t->>'reason' = 'busy', false));
  end if;
  return t || jsonb_build_object('subscribe', sub, 'maintain', :KEYQ_SCHEMA.maintain(queue));
end $$;
