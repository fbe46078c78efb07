/**
 * OpenTelemetry for keyq (`@opentelemetry/api`, an optional peer): one
 * `instrument(q)` call turns the client's lifecycle events into spans and
 * metrics that follow the OpenTelemetry messaging conventions.
 *
 * - `send`/`sendBatch`: a PRODUCER span `send <queue>`; its W3C traceparent
 *   is stored with the events (same statement, no extra round trip).
 * - each batch that did something: a CONSUMER span `receive <queue>`; each
 *   handler call a child CONSUMER span `process <queue>` linked to the
 *   producer's span (a retried delivery links to the same producer).
 * - counters `keyq.events.sent|handled|retried|dead_lettered|dropped|deferred`,
 *   a histogram `keyq.batch.duration` (seconds), and observable gauges fed by
 *   `status()`: `keyq.consumer.lag` (events), `keyq.consumer.lag_age` (s),
 *   `keyq.queue.tick_age` (s), `keyq.consumer.dead_letters`. Every time
 *   metric is in seconds (unit `s`), as the OpenTelemetry semantic
 *   conventions ask; `status()` itself reports milliseconds.
 *
 * @example
 * ```ts
 * import { keyq } from "@keyq/keyq";
 * import { fromPGlite } from "@keyq/keyq/pglite";
 * import { instrument } from "@keyq/keyq/otel";
 * const { PGlite } = await import("@electric-sql/pglite");
 *
 * const q = keyq(fromPGlite(new PGlite()));
 * const stop = instrument(q); // the global tracer and meter providers
 * stop();
 * ```
 *
 * @module
 */

import {
  type Attributes,
  type Context,
  context,
  type Link,
  type Meter,
  type MeterProvider,
  metrics,
  type Span,
  type SpanContext,
  SpanKind,
  SpanStatusCode,
  trace,
  type Tracer,
  type TracerProvider,
} from "@opentelemetry/api";
import type { BatchInfo, HandlerCall, Observable, Observer } from "./observer.ts";

export type { Observable } from "./observer.ts";

/** Options of `instrument`. */
export interface OtelOptions {
  /** Default: the global tracer provider (`trace.getTracerProvider()`). */
  tracerProvider?: TracerProvider;
  /** Default: the global meter provider (`metrics.getMeterProvider()`). */
  meterProvider?: MeterProvider;
  /**
   * The parent of a handler call's span: `"batch"` (default; linked to the
   * producer's span) or `"producer"` (the producer's span, so send and
   * handler share one trace; linked to the batch span).
   */
  parent?: "batch" | "producer";
  /** Observable gauges fed by `status()` on each metric collection (default true). */
  statusGauges?: boolean;
}

const SYSTEM = "keyq";

/** The W3C traceparent of a span context. */
export function toTraceparent(sc: SpanContext): string {
  return `00-${sc.traceId}-${sc.spanId}-${(sc.traceFlags & 0xff).toString(16).padStart(2, "0")}`;
}

/** A W3C traceparent as a remote span context, or undefined when it is malformed. */
export function fromTraceparent(tp: string | undefined): SpanContext | undefined {
  const m = tp === undefined ? null : /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/.exec(tp);
  if (!m || m[1] === "ff" || /^0+$/.test(m[2]!) || /^0+$/.test(m[3]!)) return undefined;
  return { traceId: m[2]!, spanId: m[3]!, traceFlags: parseInt(m[4]!, 16), isRemote: true };
}

function batchAttrs(b: BatchInfo): Attributes {
  return {
    "messaging.system": SYSTEM,
    "messaging.destination.name": b.queue,
    "messaging.consumer.group.name": b.consumer,
    "keyq.consumer.kind": b.kind,
  };
}

/**
 * Instruments a keyq client with OpenTelemetry: spans for sends, batches
 * and handler calls, counters and a batch-duration histogram, and
 * `status()`-fed gauges. Returns the function that stops it.
 */
export function instrument(q: Observable, options: OtelOptions = {}): () => void {
  const tracer: Tracer = (options.tracerProvider ?? trace.getTracerProvider()).getTracer("keyq");
  const meter: Meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter("keyq");
  const parentIsProducer = options.parent === "producer";
  const counter = (name: string, description: string) => meter.createCounter(name, { description, unit: "{event}" });
  const sent = counter("keyq.events.sent", "Events appended by send and sendBatch");
  const handled = counter("keyq.events.handled", "Events handled successfully in committed batches");
  const retried = counter("keyq.events.retried", "Failed events scheduled for another delivery");
  const dead = counter("keyq.events.dead_lettered", "Events moved to the dead letters");
  const dropped = counter("keyq.events.dropped", "Contended events acked without a handler call (Tier A, idempotent)");
  const deferred = counter("keyq.events.deferred", "Contended events put back without spending a retry (Tier A)");
  const duration = meter.createHistogram("keyq.batch.duration", { description: "Duration of batches that did something", unit: "s" });

  /** Batch spans, made at the first handler call (empty polls make none). */
  const spans = new WeakMap<BatchInfo, Span>();
  const batchSpan = (b: BatchInfo): Span => {
    let s = spans.get(b);
    if (!s) {
      s = tracer.startSpan(`receive ${b.queue}`, {
        kind: SpanKind.CONSUMER,
        startTime: b.startedAt,
        attributes: { ...batchAttrs(b), "messaging.operation.name": "receive", "messaging.operation.type": "receive" },
      });
      spans.set(b, s);
    }
    return s;
  };

  const observer: Observer = {
    send(info, call) {
      const span = tracer.startSpan(`send ${info.queue}`, {
        kind: SpanKind.PRODUCER,
        attributes: {
          "messaging.system": SYSTEM,
          "messaging.destination.name": info.queue,
          "messaging.operation.name": "send",
          "messaging.operation.type": "send",
          ...(info.batch ? { "messaging.batch.message_count": info.count } : {}),
        },
      });
      const ctx = trace.setSpan(context.active(), span);
      const tp = toTraceparent(span.spanContext());
      return context.with(ctx, () => call(tp)).then(
        (r) => {
          const ids = (Array.isArray(r) ? r : [r]) as { id?: unknown }[];
          if (!info.batch && typeof ids[0]?.id === "string") span.setAttribute("messaging.message.id", ids[0].id);
          span.end();
          return r;
        },
        (err: unknown) => {
          span.recordException(err instanceof Error ? err : String(err));
          span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
          span.end();
          throw err;
        },
      );
    },
    handle<T>(c: HandlerCall, call: () => T): T {
      const bs = batchSpan(c.batch);
      const producers = c.events.map((e) => fromTraceparent(e.trace)).filter((x): x is SpanContext => x !== undefined);
      const one = c.events.length === 1 ? c.events[0]! : undefined;
      let parent: Context = trace.setSpan(context.active(), bs);
      const links: Link[] = [];
      if (parentIsProducer && one && producers[0]) {
        parent = trace.setSpanContext(context.active(), producers[0]);
        links.push({ context: bs.spanContext() });
      } else {
        const seen = new Set<string>();
        for (const p of producers) {
          if (seen.has(p.spanId)) continue;
          seen.add(p.spanId);
          links.push({ context: p });
        }
      }
      const attributes: Attributes = { ...batchAttrs(c.batch), "messaging.operation.name": "process", "messaging.operation.type": "process" };
      if (one) {
        attributes["messaging.message.id"] = one.id;
        attributes["messaging.keyq.message.type"] = one.type;
        attributes["messaging.keyq.message.retry_count"] = one.retry;
        if (one.key !== null) attributes["messaging.keyq.message.key"] = one.key;
        if (one.slot !== undefined) attributes["messaging.destination.partition.id"] = String(one.slot);
      } else attributes["messaging.batch.message_count"] = c.events.length;
      const span = tracer.startSpan(`process ${c.batch.queue}`, { kind: SpanKind.CONSUMER, attributes, links }, parent);
      const fail = (err: unknown) => {
        span.recordException(err instanceof Error ? err : String(err));
        span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
        span.end();
      };
      let r: T;
      try {
        r = context.with(trace.setSpan(parent, span), call);
      } catch (err) {
        fail(err);
        throw err;
      }
      if (typeof (r as { then?: unknown } | null)?.then !== "function") {
        span.end();
        return r;
      }
      return (r as unknown as Promise<unknown>).then((v) => (span.end(), v), (err) => {
        fail(err);
        throw err;
      }) as T;
    },
    on(e) {
      switch (e.type) {
        case "sent":
          sent.add(e.ids.length, { "messaging.system": SYSTEM, "messaging.destination.name": e.send.queue });
          return;
        case "batch.committed": {
          const r = e.report;
          const a = batchAttrs(e.batch);
          const ok = Math.max(0, r.events - r.retried - r.deadLettered);
          if (ok) handled.add(ok, a);
          if (r.retried) retried.add(r.retried, a);
          if (r.deadLettered) dead.add(r.deadLettered, a);
          if (r.dropped) dropped.add(r.dropped, a);
          if (r.deferred) deferred.add(r.deferred, a);
          const busy = r.events + r.dropped + r.deferred + r.retried + r.deadLettered > 0;
          if (!busy && !spans.has(e.batch)) return;
          duration.record(e.ms / 1000, { ...a, "keyq.batch.outcome": "committed" });
          const s = batchSpan(e.batch);
          s.setAttributes({
            "messaging.batch.message_count": r.events,
            "keyq.batch.retried": r.retried,
            "keyq.batch.dead_lettered": r.deadLettered,
            "keyq.batch.dropped": r.dropped,
            "keyq.batch.deferred": r.deferred,
            "keyq.batch.statements": r.statements,
          });
          s.end();
          return;
        }
        case "batch.aborted": {
          duration.record(e.ms / 1000, { ...batchAttrs(e.batch), "keyq.batch.outcome": "aborted" });
          const s = batchSpan(e.batch);
          s.recordException(e.error instanceof Error ? e.error : String(e.error));
          s.setStatus({ code: SpanStatusCode.ERROR, message: e.error instanceof Error ? e.error.message : String(e.error) });
          s.end();
          return;
        }
      }
    },
  };
  const removeObserver = q.observe(observer);
  if (options.statusGauges === false) return removeObserver;

  const lag = meter.createObservableGauge("keyq.consumer.lag", { description: "Events a consumer (slot) is behind", unit: "{event}" });
  const lagAge = meter.createObservableGauge("keyq.consumer.lag_age", { description: "Seconds a consumer (slot) is behind", unit: "s" });
  const tickAge = meter.createObservableGauge("keyq.queue.tick_age", { description: "Seconds since the queue's last tick", unit: "s" });
  const deadLetters = meter.createObservableGauge("keyq.consumer.dead_letters", { description: "Dead letters per consumer", unit: "{event}" });
  const gauges = [lag, lagAge, tickAge, deadLetters];
  const observe = async (r: Parameters<Parameters<Meter["addBatchObservableCallback"]>[0]>[0]) => {
    const status = await q.status();
    for (const s of status) {
      const qa = { "messaging.system": SYSTEM, "messaging.destination.name": s.queue };
      if (s.lastTickAgeMs !== null) r.observe(tickAge, s.lastTickAgeMs / 1000, qa);
      for (const c of s.consumers) {
        const ca = { ...qa, "messaging.consumer.group.name": c.name, "keyq.consumer.kind": c.kind };
        r.observe(deadLetters, c.deadLetters, ca);
        for (const cu of c.cursors) {
          const sa = { ...ca, "messaging.destination.partition.id": String(cu.slot) };
          r.observe(lag, cu.lagEvents, sa);
          r.observe(lagAge, cu.lagMs / 1000, sa);
        }
      }
    }
  };
  meter.addBatchObservableCallback(observe, gauges);
  return () => {
    removeObserver();
    meter.removeBatchObservableCallback(observe, gauges);
  };
}
