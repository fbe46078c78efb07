-- Since 0.1: slot indexes are built per ring table, named
-- event_<queue>_<table>_slots<N> (ensure_slot_index). 0.1 built one index on
-- the queue's partitioned parent, event_<queue>_slots<N>; its per-table
-- children are the same indexes under generated names. They get the new
-- names, so a new ordered consumer of the same N finds them instead of
-- building twins. (Renaming takes no lock that blocks reads or writes.)
do $$
declare r record;
begin
  for r in
    select ci.relname as child, ct.relname as tbl, substring(pi.relname from '_slots[0-9]+$') as suffix
      from pg_catalog.pg_class pi
      join pg_catalog.pg_inherits h on h.inhparent = pi.oid
      join pg_catalog.pg_class ci on ci.oid = h.inhrelid
      join pg_catalog.pg_index x on x.indexrelid = ci.oid
      join pg_catalog.pg_class ct on ct.oid = x.indrelid
     where pi.relnamespace = :KEYQ_SCHEMA_NAME::regnamespace and pi.relkind = 'I'
       and pi.relname ~ '^event_[0-9]+_slots[0-9]+$'
  loop
    if pg_catalog.to_regclass(pg_catalog.format('%I.%I', :KEYQ_SCHEMA_NAME, r.tbl || r.suffix)) is null then
      execute pg_catalog.format('alter index %I.%I rename to %I', :KEYQ_SCHEMA_NAME, r.child, r.tbl || r.suffix);
    end if;
  end loop;
end $$;
