-- Since 0.1: an event may carry the W3C trace context (traceparent) of the
-- span that sent it, so a consumer's handler span can link to its producer
-- (keyq/otel). Null when the producer traces nothing. Retry rows keep it, so
-- a retried delivery links to the same producer.
alter table :KEYQ_SCHEMA.event add column ev_trace text;
alter table :KEYQ_SCHEMA.retry add column ev_trace text;
