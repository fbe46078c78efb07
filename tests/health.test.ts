// The fetch-style health handler: JSON or Prometheus text by path or Accept
// header, HTTP status from the `keyq status --check` thresholds (the same
// checkStatus the CLI uses) in both forms: 200 healthy, 503 when a threshold
// is crossed or the database does not answer. JSON reports milliseconds,
// Prometheus seconds under `_seconds` names.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { checkStatus, DEFAULT_THRESHOLDS, healthHandler, prometheusText, type QueueStatus } from "../mod.ts";
import { checkStatus as cliCheck } from "../bin/status.ts";
import { dbSkip } from "./helpers/db.ts";
import { type Fixture, pgFixture } from "./helpers/keyq.ts";

const skip = await dbSkip();

const req = (path: string, accept?: string) => new Request(`http://localhost${path}`, accept ? { headers: { accept } } : {});

test("the CLI's --check and the health handler share one check", () => {
  assert.equal(cliCheck, checkStatus);
});

test("Prometheus text: one HELP/TYPE per family, escaped labels, keyq_healthy", () => {
  const status: QueueStatus[] = [{
    queue: 'q"1',
    tables: 3,
    currentTable: 0,
    rotatedAt: "2026-01-01T00:00:00Z",
    lastTick: "5",
    lastTickAgeMs: 2_500,
    eventsSinceTick: 1,
    consumers: [{
      name: "c\\1",
      kind: "ordered",
      slots: 2,
      retries: 0,
      deadLetters: 3,
      blockedKeys: 0,
      cursors: [0, 1].map((slot) => ({ slot, lagEvents: slot * 10, lagMs: 1_250, polledAgoMs: 0, stale: false, windowOpen: false })),
    }],
  }] as QueueStatus[];
  const text = prometheusText(status, checkStatus(status, DEFAULT_THRESHOLDS));
  assert.match(text, /^keyq_consumer_lag_events\{queue="q\\"1",consumer="c\\\\1",kind="ordered",slot="1"\} 10$/m);
  assert.equal(text.match(/^# TYPE keyq_consumer_lag_events gauge$/gm)?.length, 1);
  assert.match(text, /^keyq_healthy 0$/m, "3 dead letters cross maxDead 0");
  // status() reports milliseconds; Prometheus gets seconds under _seconds names.
  assert.match(text, /^keyq_queue_tick_age_seconds\{queue="q\\"1"\} 2\.5$/m);
  assert.match(text, /^keyq_consumer_lag_seconds\{queue="q\\"1",consumer="c\\\\1",kind="ordered",slot="0"\} 1\.25$/m);
  assert.match(text, /^# problem: queue q"1, consumer c\\1: 3 dead letters \(max 0\)$/m);
});

test("a status() that fails answers 503 in both forms", async () => {
  const h = healthHandler({ status: () => Promise.reject(new Error("connection refused")) });
  const json = await h(req("/health"));
  assert.equal(json.status, 503);
  assert.deepEqual(await json.json(), { ok: false, problems: ["status() failed: connection refused"], status: [] });
  const text = await h(req("/metrics"));
  assert.equal(text.status, 503);
  assert.match(await text.text(), /^keyq_up 0$/m);
});

test("thresholds are checked when the handler is made: durations in ms or text, former names refused", () => {
  const status = () => Promise.resolve([]);
  assert.throws(() => healthHandler({ status }, { thresholds: { maxTickAge: 300 } as never }), /did you mean "maxTickAgeMs"/);
  assert.throws(() => healthHandler({ status }, { thresholds: { maxLagMs: "soon" } }), /Option "maxLagMs" is "soon"/);
  assert.equal(typeof healthHandler({ status }, { thresholds: { maxLagMs: "1m", maxTickAgeMs: 300_000 } }), "function");
});

describe("health handler on Postgres", { skip }, () => {
  let f: Fixture;
  before(async () => {
    f = await pgFixture();
    await f.q.createQueue("files", { maxRetries: 1, retryBase: 1, retryCap: 1 });
    await f.q.consumer("files", "audit").subscribe();
    await f.q.tick("files", { force: true });
  });
  after(async () => await f.close());

  test("healthy: 200 JSON by default; Prometheus by path and by Accept", async () => {
    const h = healthHandler(f.q);
    const res = await h(req("/health"));
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /application\/json/);
    const body = await res.json() as { ok: boolean; problems: string[]; status: QueueStatus[] };
    assert.equal(body.ok, true);
    assert.deepEqual(body.problems, []);
    assert.deepEqual(body.status.map((s) => s.queue), ["files"]);
    for (const r of [req("/metrics"), req("/health", "text/plain;version=0.0.4"), req("/", "application/openmetrics-text")]) {
      const m = await h(r);
      assert.equal(m.status, 200);
      assert.match(m.headers.get("content-type") ?? "", /text\/plain/);
      const text = await m.text();
      assert.match(text, /^keyq_up 1$/m);
      assert.match(text, /^keyq_healthy 1$/m);
      assert.match(text, /^keyq_consumer_lag_events\{queue="files",consumer="audit",kind="plain",slot="0"\} 0$/m);
    }
    assert.match(await (await h(req("/metrics", "application/json"))).text(), /keyq_up 1/, "the path decides over Accept");
  });

  test("a crossed threshold: 503 in both forms, naming queue and consumer; metricsAlways200 keeps the scrape at 200", async () => {
    await f.q.sendBatch("files", [{ type: "T", payload: 1 }, { type: "T", payload: 2 }, { type: "T", payload: 3 }]);
    await f.q.tick("files", { force: true });
    const lagging = healthHandler(f.q, { thresholds: { maxLag: 2 } });
    const res = await lagging(req("/health"));
    assert.equal(res.status, 503);
    const body = await res.json() as { ok: boolean; problems: string[] };
    assert.equal(body.ok, false);
    assert.deepEqual(body.problems, ["queue files, consumer audit: 3 events behind (max 2)"]);
    const m = await lagging(req("/metrics"));
    assert.equal(m.status, 503, "Prometheus text follows the thresholds too");
    const text = await m.text();
    assert.match(text, /^keyq_up 1$/m, "the database answered");
    assert.match(text, /^keyq_healthy 0$/m);
    assert.match(text, /^# problem: queue files, consumer audit: 3 events behind \(max 2\)$/m);
    const scraped = await healthHandler(f.q, { thresholds: { maxLag: 2 }, metricsAlways200: true })(req("/metrics"));
    assert.equal(scraped.status, 200);
    assert.match(await scraped.text(), /^keyq_healthy 0$/m);
    // Caught up, but one event dead-lettered: the default thresholds allow no dead letter.
    const c = f.q.consumer("files", "audit");
    const handler = (ev: { payload: unknown }) => {
      if (ev.payload === 2) throw new Error("bad");
    };
    for (let i = 0; i < 300 && (await f.q.dlq.count({ queue: "files" })) === 0; i++) await c.run({ handler });
    assert.equal((await lagging(req("/health"))).status, 200, "caught up: within maxLag");
    const strict = await healthHandler(f.q)(req("/health"));
    assert.equal(strict.status, 503);
    assert.deepEqual((await strict.json() as { problems: string[] }).problems, ["queue files, consumer audit: 1 dead letters (max 0)"]);
  });

  test("a crossed duration threshold answers 503 in both forms; the reported milliseconds pass back as thresholds", async () => {
    await f.q.tick("files", { force: true });
    await new Promise((r) => setTimeout(r, 30));
    const [st] = await f.q.status({ queue: "files" });
    const age = st!.lastTickAgeMs!;
    assert.ok(age >= 25 && age < 60_000, `lastTickAgeMs ${age} is milliseconds`);
    const cursor = st!.consumers[0]!.cursors[0]!;
    assert.ok(cursor.lagMs >= 25 && cursor.polledAgoMs >= 0, `lagMs ${cursor.lagMs}, polledAgoMs ${cursor.polledAgoMs}`);
    const stale = healthHandler(f.q, { thresholds: { maxTickAgeMs: "5ms" } });
    const res = await stale(req("/health"));
    assert.equal(res.status, 503);
    const body = await res.json() as { problems: string[]; status: QueueStatus[] };
    assert.match(body.problems[0]!, /^queue files: last tick \d+ ms ago \(max 5 ms\)$/);
    assert.ok(body.status[0]!.lastTickAgeMs! >= age, "JSON carries status() as reported: milliseconds");
    const m = await stale(req("/metrics"));
    assert.equal(m.status, 503);
    const seconds = Number(/^keyq_queue_tick_age_seconds\{queue="files"\} (\S+)$/m.exec(await m.text())?.[1]);
    assert.ok(seconds >= age / 1000 && seconds < 60, `Prometheus reports seconds: ${seconds}`);
    // Reported milliseconds are threshold milliseconds: the reported lag less 1 ms is crossed (lag only
    // grows), the reported age plus an hour is not.
    assert.equal((await healthHandler(f.q, { thresholds: { maxTickAgeMs: age + 3_600_000 } })(req("/health"))).status, 200);
    assert.equal((await healthHandler(f.q, { thresholds: { maxLagMs: cursor.lagMs - 1 } })(req("/metrics"))).status, 503);
    assert.equal((await healthHandler(f.q, { thresholds: { maxLagMs: "1h" } })(req("/metrics"))).status, 200);
  });
});
