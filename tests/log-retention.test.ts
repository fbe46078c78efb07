// The log read again, part 1: retention keeps events past their consumers
// (and lets them go once it passes), and a new consumer from "earliest" gets
// the whole retained history once, in order, late commits included.
// Positions and seek: tests/log-positions.test.ts; operator controls and the
// CLI: tests/log-controls.test.ts.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Consumer, KeyqEvent } from "../mod.ts";
import { dbSkip, type Sql } from "./helpers/db.ts";
import { type PgFixture, withPg } from "./helpers/fixture.ts";
import { worker } from "./helpers/sync.ts";

const skip = await dbSkip();

/** Rows and bytes of each ring table of queue `queue`. */
async function tables(f: PgFixture, queue: string): Promise<{ rows: number; bytes: number }[]> {
  const [{ id, n }] = (await f.raw(`select queue_id as id, ntables as n from "${f.schema}".queue where queue_name = $1`, [queue])) as [
    { id: number; n: number },
  ];
  const out = [];
  for (let i = 0; i < n; i++) {
    const t = `"${f.schema}".event_${id}_${i}`;
    const [r] = await f.raw(`select count(*)::int as rows, pg_total_relation_size('${t}')::int as bytes from ${t}`);
    out.push({ rows: Number(r!.rows), bytes: Number(r!.bytes) });
  }
  return out;
}

/** Everything a consumer gets until it is quiet, as "id:key". */
async function drain(c: Consumer, into: string[] = []): Promise<string[]> {
  for (let i = 0; i < 50; i++) {
    const r = await c.run({ maxEvents: 500, handler: (ev: KeyqEvent) => void into.push(`${ev.id}:${ev.key}`) });
    if (r.events === 0) break;
  }
  return into;
}

const events = (n: number, from = 0) => Array.from({ length: n }, (_, i) => ({ type: "E", payload: { i: from + i }, key: `k${(from + i) % 7}` }));

/** Opens a transaction on its own connection, sends one event in it, and returns the commit. */
async function lateSend(sql: Sql, schema: string, queue: string, key: string): Promise<{ id: string; commit: () => Promise<void> }> {
  const r = await sql.reserve();
  await r.unsafe("begin");
  const [row] = await r.unsafe(`select "${schema}".send($1, 'Late', '{"late":true}'::jsonb, $2)::text as r`, [queue, key]);
  return {
    id: JSON.parse(String(row!.r)).id,
    commit: async () => {
      try {
        await r.unsafe("commit");
      } finally {
        r.release();
      }
    },
  };
}

describe("retention", () => {
  test("keeps a ring table past its consumers while it is younger than the retention, and lets it go once it passes (sizes measured)", {
    skip,
    timeout: 120_000,
  }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("kept", { retention: "1 hour" });
      await f.q.createQueue("plain"); // no retention: today's behaviour
      const readers = { kept: f.q.consumer("kept", "r"), plain: f.q.consumer("plain", "r") };
      for (const c of Object.values(readers)) await c.subscribe();
      for (const queue of ["kept", "plain"] as const) {
        for (let round = 0; round < 3; round++) {
          await f.q.sendBatch(queue, events(400, round * 400));
          assert.equal((await drain(readers[queue])).length, 400, `${queue}: the consumer passes round ${round}`);
          await f.q.maintain(queue, { forceRotate: true });
        }
      }
      const kept = await tables(f, "kept");
      const plain = await tables(f, "plain");
      console.log(
        `retention 1 h: rows per ring table ${kept.map((t) => t.rows).join("/")}, bytes ${kept.map((t) => t.bytes).join("/")}; ` +
          `no retention: rows ${plain.map((t) => t.rows).join("/")}, bytes ${plain.map((t) => t.bytes).join("/")}`,
      );
      assert.equal(kept.reduce((n, t) => n + t.rows, 0), 1200, "every event is kept past its consumer");
      assert.equal(plain.reduce((n, t) => n + t.rows, 0), 800, "without retention the third rotation truncated the passed table 0");
      assert.equal(plain[0]!.rows, 0);
      const [st] = await f.q.status({ queue: "kept" });
      assert.equal(st!.retention, 3_600_000, "milliseconds, as listQueues reports it");
      assert.equal(st!.retained.events, 1200);
      assert.ok(st!.retained.bytes >= kept.reduce((n, t) => n + t.bytes, 0) - 1);
      assert.equal(st!.retained.oldestEventId, "1");
      const refused = await f.q.maintain("kept", { forceRotate: true });
      assert.equal(refused[0]!.rotation?.rotated, false);
      assert.equal(refused[0]!.rotation?.reason, "retention");

      // The retention passes: the oldest table goes, and the retained range starts after it.
      await f.q.updateQueue("kept", { retention: "1s" });
      await new Promise((r) => setTimeout(r, 1100));
      const rotated = await f.q.maintain("kept", { forceRotate: true });
      assert.equal(rotated[0]!.rotation?.rotated, true);
      const after = await tables(f, "kept");
      console.log(`retention passed: rows per ring table ${after.map((t) => t.rows).join("/")}, bytes ${after.map((t) => t.bytes).join("/")}`);
      assert.equal(after.reduce((n, t) => n + t.rows, 0), 800);
      const [st2] = await f.q.status({ queue: "kept" });
      assert.equal(st2!.retained.events, 800);
      assert.equal(st2!.retained.oldestEventId, "401");
      // Earliest now starts after the truncated table: 800 events, once.
      const late = f.q.consumer("kept", "late");
      await late.subscribe({ from: "earliest" });
      const got = await drain(late);
      assert.equal(got.length, 800);
      assert.equal(got[0], "401:k1");
      // Turning retention off is 0.
      assert.equal((await f.q.updateQueue("kept", { retention: 0 })).retention, null);
    });
  });
});

describe('from: "earliest"', () => {
  test("a new consumer gets the whole retained history once and in order (plain: the live order; Tier B: per key), late commits included", {
    skip,
    timeout: 120_000,
  }, async () => {
    await withPg({ max: 3 }, async (f, defer) => {
      const other = worker(f.url, f.schema, 0, "kq-late");
      defer(() => other.sql.end());
      await f.q.createQueue("files", { retention: "1 hour" });
      const live = f.q.consumer("files", "live");
      await live.subscribe();
      const seen: string[] = [];
      // A late commit: its transaction starts (and takes its id) before the
      // others, commits after two ticks, so it lands in a later window.
      const late = await lateSend(other.sql, f.schema, "files", "k3");
      await f.q.sendBatch("files", events(50));
      await f.q.tick("files", { force: true });
      await drain(live, seen);
      await f.q.maintain("files", { forceRotate: true }); // history spans two ring tables
      await f.q.sendBatch("files", events(50, 50));
      await f.q.tick("files", { force: true });
      await drain(live, seen); // the live consumer reads every tick's window on its own
      await late.commit();
      await f.q.sendBatch("files", events(30, 100));
      await f.q.tick("files", { force: true });
      await drain(live, seen);
      assert.equal(seen.length, 131);
      const lateKey = `${late.id}:k3`;
      assert.equal(seen.indexOf(lateKey), 100, `the late commit (id ${late.id}) came in the window it committed in`);

      const perKey = (list: string[]) => {
        const m = new Map<string, string[]>();
        for (const e of list) {
          const k = e.split(":")[1]!;
          m.set(k, [...(m.get(k) ?? []), e]);
        }
        return m;
      };
      // One key's history, read: window by window as the live consumer saw it.
      const history = await f.q.history("files", "k3");
      assert.deepEqual(history.map((e) => `${e.id}:${e.key}`), perKey(seen).get("k3"), "the late commit keeps its place");
      const page = await f.q.history("files", "k3", { limit: 3 });
      const next = await f.q.history("files", "k3", { after: page[2]!.position, limit: 100 });
      assert.deepEqual([...page, ...next].map((e) => e.id), history.map((e) => e.id), "pages by position");

      // A consumer from earliest reads the history with the same window rules,
      // in windows as wide as the ticks it reads at once: each event once, one
      // producer's events in send order; the late commit once (a concurrent
      // producer's event has no defined order against the others).
      const withoutLate = (list: string[]) => list.filter((e) => e !== lateKey);
      const plain = f.q.consumer("files", "replayer");
      assert.equal(await plain.subscribe({ from: "earliest" }), true);
      const replayed = await drain(plain);
      assert.deepEqual(withoutLate(replayed), withoutLate(seen), "the same events in the same order");
      assert.equal(replayed.filter((e) => e === lateKey).length, 1, "the late commit once");
      const ordered = f.q.ordered("files", "rebuild", { slots: 4 });
      await ordered.subscribe({ from: "earliest" });
      const got = await drain(ordered);
      assert.equal(got.length, 131, "each event once");
      assert.equal(new Set(got).size, 131);
      assert.deepEqual(perKey(withoutLate(got)), perKey(withoutLate(seen)), "per key, the send order");
      const x = f.q.exclusive("files", "again");
      await x.subscribe({ from: "earliest" });
      assert.deepEqual((await drain(x)).sort(), [...seen].sort(), "Tier A: every retained event once");
    });
  });

  test('the default start is "latest", independent of whether a tick happened', { skip, timeout: 120_000 }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files");
      for (const ticked of [false, true]) {
        await f.q.sendBatch("files", events(3));
        if (ticked) await f.q.tick("files", { force: true });
        const c = f.q.consumer("files", `c${ticked}`);
        assert.deepEqual(await drain(c), [], `sent before the first run${ticked ? " and a tick" : ""}: not delivered`);
        await f.q.sendBatch("files", events(2, 3));
        assert.equal((await drain(c)).length, 2, "sent after: delivered");
      }
      await assert.rejects(f.q.consumer("files", "bad").subscribe({ from: "beginning" } as never), { code: "INVALID_INPUT" });
      await assert.rejects(f.q.consumer("files", "bad").subscribe({ start: "earliest" } as never), { code: "INVALID_INPUT" });
      assert.equal((await f.raw(`select 1 from "${f.schema}".consumer where consumer_name = 'bad'`)).length, 0, "nothing written");
    });
  });
});
