-- Since 0.1: slot_of schema-qualifies its operators. Slot indexes depend on
-- slot_of, so it is frozen here (never dropped and re-created with the
-- function set); the result is the same for every key, so existing slot
-- indexes stay valid.

-- (hashtextextended(K, 0) % N + N) % N, sign-safe; a null key goes to slot 0.
-- Immutable and without a SET clause so it inlines and matches the index.
-- Inlined, its body is parsed with the caller's search_path (and the index
-- expression with whatever path a backend had when it loaded the index), so
-- every operator and function is schema-qualified: a user's % operator must
-- never change routing, nor corrupt the slot index.
create or replace function :KEYQ_SCHEMA.slot_of(key text, n int) returns int
language sql immutable parallel safe
as $$ select coalesce((((pg_catalog.hashtextextended(key, 0) operator(pg_catalog.%) n) operator(pg_catalog.+) n)
                       operator(pg_catalog.%) n)::pg_catalog.int4, 0) $$;
