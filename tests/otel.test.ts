// keyq/otel with the OpenTelemetry SDK's in-memory exporter and a metric
// reader: one trace from send to the handler through a retry (the retried
// delivery links to the same producer span), and the metric values after a
// known workload.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { SpanKind, SpanStatusCode } from "@opentelemetry/api";
import { BasicTracerProvider, InMemorySpanExporter, type ReadableSpan, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base";
import { MeterProvider, MetricReader } from "@opentelemetry/sdk-metrics";
import { fromTraceparent, instrument, toTraceparent } from "../src/observe/otel.ts";
import { keyq, type LifecycleEvent } from "../mod.ts";
import { dbSkip } from "./helpers/db.ts";
import { type Fixture, pgFixture } from "./helpers/keyq.ts";

const skip = await dbSkip();

/** A reader that exports nothing: the test collects on demand. */
class TestReader extends MetricReader {
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

/** Sum of a metric's data points whose attributes include `attrs`. */
async function value(reader: TestReader, name: string, attrs: Record<string, unknown> = {}): Promise<number | undefined> {
  const { resourceMetrics } = await reader.collect();
  let sum: number | undefined;
  for (const sm of resourceMetrics.scopeMetrics) {
    for (const m of sm.metrics) {
      if (m.descriptor.name !== name) continue;
      for (const dp of m.dataPoints) {
        if (!Object.entries(attrs).every(([k, v]) => dp.attributes[k] === v)) continue;
        const v = dp.value as number | { count: number };
        sum = (sum ?? 0) + (typeof v === "number" ? v : v.count);
      }
    }
  }
  return sum;
}

const parentOf = (s: ReadableSpan) => s.parentSpanContext?.spanId;

test("traceparent round trip; malformed ones are refused", () => {
  const sc = { traceId: "0af7651916cd43dd8448eb211c80319c", spanId: "b7ad6b7169203331", traceFlags: 1 };
  const tp = toTraceparent(sc);
  assert.equal(tp, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  assert.deepEqual(fromTraceparent(tp), { ...sc, isRemote: true });
  for (
    const bad of [
      undefined,
      "",
      "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
      "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
      `00-${"0".repeat(32)}-b7ad6b7169203331-01`,
    ]
  ) {
    assert.equal(fromTraceparent(bad), undefined, String(bad));
  }
});

describe("keyq/otel on Postgres", { skip }, () => {
  let f: Fixture;
  const exporter = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
  const reader = new TestReader();
  const meterProvider = new MeterProvider({ readers: [reader] });
  let stop: () => void;
  const events: LifecycleEvent[] = [];

  before(async () => {
    f = await pgFixture();
    stop = instrument(f.q, { tracerProvider, meterProvider });
    f.q.observe({ on: (e) => events.push(e) });
  });
  after(async () => {
    stop();
    await f.close();
  });

  test("one trace from send to the handler, through a retry", async () => {
    await f.q.createQueue("traced", { retryBase: 1, retryCap: 1 });
    const c = f.q.exclusive("traced", "worker");
    await c.subscribe();
    exporter.reset();
    const sent = await f.q.send("traced", { type: "FileCreated", payload: { n: 1 }, key: "tenant-1" });
    const seen: { retry: number; trace?: string }[] = [];
    const handler = (ev: { retry: number; trace?: string }) => {
      seen.push({ retry: ev.retry, trace: ev.trace });
      if (ev.retry === 0) throw new Error("first delivery fails");
    };
    const first = await c.run({ handler });
    assert.equal(first.retried, 1);
    // Due after the backoff (1 ms base, jittered): run until the retry came.
    for (let i = 0; i < 200 && seen.length < 2; i++) await c.run({ handler });
    assert.equal(seen.length, 2, "delivered twice: the failure and its retry");

    const spans = exporter.getFinishedSpans();
    const producer = spans.filter((s) => s.kind === SpanKind.PRODUCER);
    assert.equal(producer.length, 1);
    const p = producer[0]!;
    assert.equal(p.name, "send traced");
    assert.equal(p.attributes["messaging.system"], "keyq");
    assert.equal(p.attributes["messaging.destination.name"], "traced");
    assert.equal(p.attributes["messaging.message.id"], sent.id);
    // The stored trace context is the producer span's.
    assert.equal(seen[0]!.trace, toTraceparent(p.spanContext()));
    assert.equal(seen[1]!.trace, seen[0]!.trace, "the retry row kept the trace context");

    const process = spans.filter((s) => s.name === "process traced");
    assert.equal(process.length, 2);
    const batches = spans.filter((s) => s.name === "receive traced");
    assert.equal(batches.length, 2, "one span per batch that handled something");
    for (const [i, s] of process.entries()) {
      assert.equal(s.kind, SpanKind.CONSUMER);
      assert.equal(s.attributes["messaging.message.id"], sent.id);
      assert.equal(s.attributes["messaging.keyq.message.key"], "tenant-1");
      assert.equal(s.attributes["messaging.consumer.group.name"], "worker");
      assert.equal(s.attributes["messaging.keyq.message.retry_count"], i);
      assert.equal(s.links.length, 1);
      assert.equal(s.links[0]!.context.traceId, p.spanContext().traceId);
      assert.equal(s.links[0]!.context.spanId, p.spanContext().spanId);
      const batch = batches.find((b) => b.spanContext().spanId === parentOf(s));
      assert.ok(batch, "the handler span is a child of its batch span");
      assert.equal(s.spanContext().traceId, batch.spanContext().traceId);
    }
    assert.equal(process[0]!.status.code, SpanStatusCode.ERROR);
    assert.equal(process[0]!.events.some((e) => e.name === "exception"), true);
    assert.notEqual(process[1]!.status.code, SpanStatusCode.ERROR);
  });

  test("a dead letter keeps its event's trace context; a replay delivers it again, linked to the producer", async () => {
    await f.q.createQueue("dead-traced", { maxRetries: 0 });
    const c = f.q.consumer("dead-traced", "w");
    await c.subscribe();
    exporter.reset();
    const sent = await f.q.send("dead-traced", { type: "T", payload: "x", key: "k" });
    const producer = exporter.getFinishedSpans().find((s) => s.name === "send dead-traced")!;
    const traceparent = toTraceparent(producer.spanContext());
    const seen: (string | undefined)[] = [];
    let fail = true;
    const handler = (ev: { trace?: string }) => {
      seen.push(ev.trace);
      if (fail) throw new Error("dead on arrival");
    };
    assert.equal((await c.run({ handler })).deadLettered, 1, "maxRetries 0: the first failure dead-letters");
    const [dead] = await f.q.dlq.list({ queue: "dead-traced" });
    assert.equal(dead!.eventId, sent.id);
    assert.equal(dead!.trace, traceparent, "the dead letter keeps the producer's trace context");
    // Replayed: the delivery carries the trace again and its handler span links to the producer.
    assert.equal(await f.q.dlq.replay([dead!.id]), 1);
    fail = false;
    exporter.reset();
    for (let i = 0; i < 100 && seen.length < 2; i++) await c.run({ handler });
    assert.deepEqual(seen, [traceparent, traceparent]);
    const replayed = exporter.getFinishedSpans().find((s) => s.name === "process dead-traced")!;
    assert.equal(replayed.links[0]?.context.spanId, producer.spanContext().spanId);
    assert.equal(await f.q.dlq.count({ queue: "dead-traced" }), 0);

    // An operator's dead-letter of a blocked head (Tier B pause) keeps it too.
    await f.q.createQueue("head-traced", { maxRetries: 5, retryBase: "1h" });
    const o = f.q.ordered("head-traced", "life", { slots: 2, onFailure: "pause" });
    await o.subscribe();
    exporter.reset();
    await f.q.send("head-traced", { type: "T", payload: 1, key: "bad" });
    const headTrace = toTraceparent(exporter.getFinishedSpans().find((s) => s.name === "send head-traced")!.spanContext());
    await o.run({
      handler: () => {
        throw new Error("poison");
      },
    });
    await f.q.settleHead("head-traced", "life", "bad", "deadLetter");
    assert.equal((await f.q.dlq.list({ queue: "head-traced" }))[0]!.trace, headTrace);

    // Untraced: a client without instrument() stores no trace context, and its dead letter says null.
    const plain = keyq(f.q.driver, { schema: f.schema });
    await plain.send("dead-traced", { type: "T", payload: "y" });
    fail = true;
    await plain.consumer("dead-traced", "w").run({ handler });
    assert.deepEqual((await f.q.dlq.list({ queue: "dead-traced" })).map((d) => d.trace), [null]);
  });

  test("parent: producer puts send and handler in one trace", async () => {
    const exp = new InMemorySpanExporter();
    const tp = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exp)] });
    const q2 = keyq(f.q.driver, { schema: f.schema }); // a client of its own: no other tracing observer
    const off = instrument(q2, { tracerProvider: tp, parent: "producer", statusGauges: false });
    try {
      await q2.createQueue("one-trace");
      const c = q2.consumer("one-trace", "c");
      await c.subscribe();
      await q2.send("one-trace", { type: "T", payload: 1 });
      await c.run({ handler: () => {} });
      const spans = exp.getFinishedSpans();
      const send = spans.find((s) => s.name === "send one-trace")!;
      const proc = spans.find((s) => s.name === "process one-trace")!;
      assert.equal(proc.spanContext().traceId, send.spanContext().traceId);
      assert.equal(parentOf(proc), send.spanContext().spanId);
      assert.equal(proc.links.length, 1, "linked to its batch span");
    } finally {
      off();
    }
  });

  test("metric values after a known workload", async () => {
    await f.q.createQueue("metered", { maxRetries: 1, retryBase: 1, retryCap: 1 });
    const c = f.q.consumer("metered", "m");
    await c.subscribe();
    await f.q.sendBatch<unknown>("metered", [{ type: "T", payload: 1 }, { type: "T", payload: 2 }, { type: "T", payload: "bad" }]);
    await f.q.send("metered", { type: "T", payload: 3 });
    await f.q.send("metered", { type: "T", payload: 4 });
    const handler = (ev: { payload: unknown }) => {
      if (ev.payload === "bad") throw new Error("always fails");
    };
    const q = { "messaging.destination.name": "metered" };
    for (let i = 0; i < 300 && (await f.q.dlq.count({ queue: "metered" })) === 0; i++) await c.run({ handler });
    assert.equal(await value(reader, "keyq.events.sent", q), 5);
    assert.equal(await value(reader, "keyq.events.handled", q), 4);
    assert.equal(await value(reader, "keyq.events.retried", q), 1, "the first failure is retried (maxRetries 1)");
    assert.equal(await value(reader, "keyq.events.dead_lettered", q), 1, "the second one is dead-lettered");
    assert.equal(await value(reader, "keyq.events.dropped", q), undefined);
    assert.ok((await value(reader, "keyq.batch.duration", q))! >= 2, "batch durations recorded");
    // Gauges fed by status(): the consumer is caught up, one dead letter.
    assert.equal(await value(reader, "keyq.consumer.lag", { ...q, "messaging.consumer.group.name": "m" }), 0);
    assert.equal(await value(reader, "keyq.consumer.dead_letters", { ...q, "messaging.consumer.group.name": "m" }), 1);
    // Time gauges in seconds (unit "s"), from status()'s milliseconds: the gauge read first, status() after it.
    const t0 = Date.now();
    const tickAge = (await value(reader, "keyq.queue.tick_age", q))!;
    const [st] = await f.q.status({ queue: "metered" });
    const between = Date.now() - t0;
    assert.ok(
      tickAge * 1000 <= st!.lastTickAgeMs! + 1 && tickAge * 1000 >= st!.lastTickAgeMs! - between - 1,
      `tick_age ${tickAge} s, lastTickAgeMs ${st!.lastTickAgeMs}`,
    );
    // Lifecycle events of the same workload.
    const mine = events.filter((e) => "batch" in e && (e.batch as { queue: string }).queue === "metered");
    assert.equal(mine.filter((e) => e.type === "events.deadLettered").length, 1);
    assert.equal(mine.filter((e) => e.type === "events.retried").length, 1);
  });
});
