-- Since 0.1: a dead letter keeps the W3C trace context (traceparent) its
-- event was sent under (event.ev_trace, 013), so the dead letter names its
-- producer and a replayed delivery links to the producer's span again
-- (keyq/otel). Null when the producer traced nothing, and for dead letters
-- written before this migration. Functions are in
-- src/sql/functions/02_failures.sql (ack, dlq_list, dlq_requeue) and
-- 07_positions.sql (settle_head).
alter table :KEYQ_SCHEMA.dead_letter add column ev_trace text;
