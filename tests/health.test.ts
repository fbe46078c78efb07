// The fetch-style health handler: JSON or Prometheus text by path or Accept
// header, HTTP status from the `keyq status --check` thresholds (the same
// checkStatus the CLI uses), 503 when the database does not answer.
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
    lastTickAge: 2,
    eventsSinceTick: 1,
    consumers: [{
      name: "c\\1",
      kind: "ordered",
      slots: 2,
      retries: 0,
      deadLetters: 3,
      blockedKeys: 0,
      cursors: [0, 1].map((slot) => ({ slot, lagEvents: slot * 10, lagSeconds: 1, polledAgo: 0, stale: false, windowOpen: false })),
    }],
  }] as QueueStatus[];
  const text = prometheusText(status, checkStatus(status, DEFAULT_THRESHOLDS));
  assert.match(text, /^keyq_consumer_lag_events\{queue="q\\"1",consumer="c\\\\1",kind="ordered",slot="1"\} 10$/m);
  assert.equal(text.match(/^# TYPE keyq_consumer_lag_events gauge$/gm)?.length, 1);
  assert.match(text, /^keyq_healthy 0$/m, "3 dead letters cross maxDead 0");
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

  test("a crossed threshold: 503 naming queue and consumer; Prometheus keeps 200 with keyq_healthy 0", async () => {
    await f.q.sendBatch("files", [{ type: "T", payload: 1 }, { type: "T", payload: 2 }, { type: "T", payload: 3 }]);
    await f.q.tick("files", { force: true });
    const lagging = healthHandler(f.q, { thresholds: { maxLag: 2 } });
    const res = await lagging(req("/health"));
    assert.equal(res.status, 503);
    const body = await res.json() as { ok: boolean; problems: string[] };
    assert.equal(body.ok, false);
    assert.deepEqual(body.problems, ["queue files, consumer audit: 3 events behind (max 2)"]);
    const m = await lagging(req("/metrics"));
    assert.equal(m.status, 200);
    assert.match(await m.text(), /^keyq_healthy 0$/m);
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
});
