-- The engine functions (src/sql/functions/) are not numbered migrations:
-- migrate() re-applies the whole set when its content hash differs from the
-- one recorded here (one row), dropping the previous set first, unless the
-- recorded set is a newer keyq version's (an older build never downgrades it).

create table :KEYQ_SCHEMA.function_set (
  hash       text not null,
  version    text not null,
  applied_at timestamptz not null default now()
);
