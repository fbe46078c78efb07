// One unit in, the same unit out (issue 21): every duration keyq reports is
// milliseconds, the unit a number means wherever keyq takes a duration, so a
// reported setting passed back unchanged means the same thing; duration text
// is accepted everywhere a duration is taken.
import assert from "node:assert/strict";
import { test } from "node:test";
import { checkStatus, healthHandler, type QueueInfo, type QueueSettings } from "../mod.ts";
import { thresholds } from "../bin/cli.ts";
import { batchSettings } from "../src/batch/settings.ts";
import { QUEUE_SETTINGS } from "../src/ops/queue-settings.ts";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";
import { refused } from "./helpers/refused.ts";

const skip = await dbSkip();

/** Every setting createQueue takes, as text, and what it means in milliseconds. */
const GIVEN: Record<string, [string | number, number]> = {
  tables: [4, 4],
  maxRetries: [7, 7],
  retryBase: ["1.5s", 1_500],
  retryCap: ["1h", 3_600_000],
  rotationPeriod: ["2 hours", 7_200_000],
  tickMaxCount: [500, 500],
  tickMaxLag: ["250ms", 250],
  tickIdlePeriod: ["90s", 90_000],
  retention: ["7d", 604_800_000],
};

/** The settings part of a reported queue, as createQueue takes it. */
function settingsOf(info: QueueInfo): QueueSettings {
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(QUEUE_SETTINGS)) out[k] = (info as unknown as Record<string, unknown>)[k];
  return out as QueueSettings;
}

test("the settings table lists every setting this test checks", () => {
  assert.deepEqual(Object.keys(GIVEN).sort(), Object.keys(QUEUE_SETTINGS).sort());
});

test("every reported queue setting round-trips through createQueue, updateQueue and listQueues", { skip }, () =>
  withPg(async (f) => {
    const given = Object.fromEntries(Object.entries(GIVEN).map(([k, [v]]) => [k, v])) as QueueSettings;
    const { created, queue } = await f.q.createQueue("u", given);
    assert.equal(created, true);
    for (const [k, [, ms]] of Object.entries(GIVEN)) {
      assert.equal((queue as unknown as Record<string, number>)[k], ms, `${k} is reported in milliseconds`);
    }
    // Passed back unchanged to createQueue: the same settings, not a conflict.
    const again = await f.q.createQueue("u", settingsOf(queue));
    assert.equal(again.created, false);
    assert.deepEqual(settingsOf(again.queue), settingsOf(queue));
    // Passed back to updateQueue (tables is fixed at creation): nothing changes.
    const { tables: _fixed, ...changeable } = settingsOf(queue);
    const updated = await f.q.updateQueue("u", changeable);
    assert.deepEqual(settingsOf(updated), settingsOf(queue));
    const listed = (await f.q.listQueues()).find((x) => x.name === "u")!;
    assert.deepEqual(settingsOf(listed), settingsOf(queue));
    // The example: "1h" reported as 3600000, which means an hour everywhere.
    assert.equal(listed.retryCap, 3_600_000);
    assert.equal((await f.q.createQueue("u", { retryCap: listed.retryCap })).created, false);
    assert.equal((await f.q.updateQueue("u", { retryCap: listed.retryCap })).retryCap, 3_600_000);
    // A different value is still a conflict, worded in milliseconds.
    const err = await refused(f.q.createQueue("u", { retryCap: "2h" }), "QUEUE_EXISTS");
    assert.deepEqual([err.details.existing, err.details.requested], [3_600_000, 7_200_000]);
    assert.match(err.message, /retryCap 3600000 ms, not 7200000 ms/);
  }));

test("sub-second durations keep their milliseconds", { skip }, () =>
  withPg(async (f) => {
    const { queue } = await f.q.createQueue("ms", { retryBase: 1, retryCap: "1.5ms", tickMaxLag: 0 });
    assert.deepEqual([queue.retryBase, queue.retryCap, queue.tickMaxLag], [1, 1.5, 0]);
    assert.equal((await f.q.createQueue("ms", settingsOf(queue))).created, false);
  }));

test("run and work durations take numbers (milliseconds) and text alike", () => {
  const handler = () => {};
  const text = batchSettings(
    { handler, budgetMs: "2s", minPollMs: "50ms", maxPollMs: "1 minute", retryBackoff: { baseMs: "1s", capMs: "30s" } },
    "work options",
  );
  const numbers = batchSettings({ handler, budgetMs: 2000, minPollMs: 50, maxPollMs: 60_000, retryBackoff: { baseMs: 1000, capMs: 30_000 } }, "work options");
  for (const s of [text, numbers]) {
    assert.deepEqual([s.budgetMs, s.minPollMs, s.maxPollMs, s.retryBackoff.baseMs, s.retryBackoff.capMs], [2000, 50, 60_000, 1000, 30_000]);
  }
  assert.equal(batchSettings({ handler, budgetMs: "1.5s" }, "run options").budgetMs, 1500);
  assert.throws(() => batchSettings({ handler, minPollMs: "2s", maxPollMs: "1s" }, "work options"), /"minPollMs" \(2000 ms\) is above "maxPollMs" \(1000 ms\)/);
  assert.throws(() => batchSettings({ handler, budgetMs: "soon" }, "run options"), /Option "budgetMs" is "soon"/);
  assert.throws(() => batchSettings({ handler, budgetMs: 0 }, "run options"), /positive duration/);
  assert.throws(() => batchSettings({ handler, budgetMs: "2 days" }, "run options"), /at most 86400000 ms/);
});

test("status() reports milliseconds that pass back as settings, thresholds and staleAfter", { skip }, () =>
  withPg(async (f) => {
    await f.q.createQueue("st", { retention: "7d" });
    const c = f.q.consumer("st", "audit");
    await c.subscribe();
    await f.q.send("st", { type: "T", payload: 1 });
    await f.q.tick("st", { force: true });
    await new Promise((r) => setTimeout(r, 60));
    const [s] = await f.q.status({ queue: "st" });
    const cu = s!.consumers[0]!.cursors[0]!;
    // Milliseconds: at least the 60 ms waited, far below a minute (seconds would read 0.06).
    for (const [name, ms] of [["lastTickAgeMs", s!.lastTickAgeMs!], ["lagMs", cu.lagMs], ["polledAgoMs", cu.polledAgoMs]] as const) {
      assert.ok(ms >= 55 && ms < 60_000, `${name} ${ms} is milliseconds`);
    }
    // Every number status() reports is classified: a new field fails here until it is (a duration must be ms).
    const numbers = new Set<string>();
    const walk = (o: unknown, path: string): void => {
      if (typeof o === "number") numbers.add(path.replace(/\.\d+/g, "[]"));
      else if (o && typeof o === "object") { for (const [k, v] of Object.entries(o)) walk(v, path ? `${path}.${k}` : k); }
    };
    walk(s, "");
    const durations = ["lastTickAgeMs", "retention", "consumers[].cursors[].lagMs", "consumers[].cursors[].polledAgoMs"];
    const counts = [
      "tables",
      "currentTable",
      "eventsSinceTick",
      "retained.events",
      "retained.bytes",
      "consumers[].slots",
      "consumers[].retries",
      "consumers[].deadLetters",
      "consumers[].blockedKeys",
      "consumers[].cursors[].slot",
      "consumers[].cursors[].lagEvents",
    ];
    assert.deepEqual([...numbers].sort(), [...durations, ...counts].sort());
    // retention: the setting's unit and name, the same value listQueues reports, taken back as it is.
    const listed = (await f.q.listQueues()).find((x) => x.name === "st")!;
    assert.equal(s!.retention, 604_800_000);
    assert.equal(s!.retention, listed.retention);
    assert.equal((await f.q.createQueue("st", { retention: s!.retention })).created, false);
    assert.equal((await f.q.updateQueue("st", { retention: s!.retention })).retention, 604_800_000);
    // Ages as thresholds (API and CLI flags): the reported value itself is not crossed, 1 ms less is.
    const at = { maxTickAgeMs: s!.lastTickAgeMs!, maxLagMs: cu.lagMs };
    assert.deepEqual(checkStatus([s!], at), []);
    assert.equal(checkStatus([s!], { maxTickAgeMs: at.maxTickAgeMs - 1, maxLagMs: at.maxLagMs - 1 }).length, 2);
    const flags = thresholds({ "max-tick-age": String(at.maxTickAgeMs), "max-lag-age": String(at.maxLagMs) })!;
    assert.deepEqual([flags.maxTickAgeMs, flags.maxLagMs], [at.maxTickAgeMs, at.maxLagMs]);
    assert.deepEqual(checkStatus([s!], { ...flags, maxDead: undefined, maxBlocked: undefined, stale: false }), []);
    // The health handler takes them too (the lag only grows, so 1 ms less is crossed on any later call).
    assert.equal((await healthHandler(f.q, { thresholds: { maxLagMs: cu.lagMs - 1 } })(new Request("http://h/health"))).status, 503);
    assert.equal((await healthHandler(f.q, { thresholds: { maxLagMs: cu.lagMs + 3_600_000 } })(new Request("http://h/health"))).status, 200);
    // polledAgoMs as staleAfter: half of it marks the cursor stale, an hour more does not.
    const stale = async (staleAfter: number) => (await f.q.status({ queue: "st", staleAfter }))[0]!.consumers[0]!.cursors[0]!.stale;
    assert.equal(await stale(Math.max(1, cu.polledAgoMs / 2)), true);
    assert.equal(await stale(cu.polledAgoMs + 3_600_000), false);
  }));
