// A woken Tier B worker ends its run on a batch that read every free slot
// (no look after COMMIT), unless a tick came while it held its slot: the
// worker woken for that tick passed over the held slot, so the holder looks
// again once its COMMIT answered. Polls are a minute apart, so only that
// look can bring the second event within the test.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import postgres from "postgres";
import { keyq, type LifecycleEvent } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { FULL_RUN_MS, loopTuning } from "../src/kinds/loop.ts";
import { dbSkip, dropSchema, freshSchema, requireDatabase } from "./helpers/db.ts";

const skip = await dbSkip();
const url = skip ? "" : await requireDatabase();
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(what: string, ok: () => boolean, ms = 15_000): Promise<void> {
  for (const end = Date.now() + ms; !ok();) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(2);
  }
}

describe("a tick that comes while a batch holds its slot", { skip }, () => {
  test("Tier B, 1 slot, 2 workers: the holder looks again after its COMMIT and takes the event the other passed over", async () => {
    loopTuning.fullRunMs = 10 * 60_000; // no periodic full run inside the test
    const schema = freshSchema();
    const admin = postgres(url, { max: 1, onnotice: () => {} });
    const conns: postgres.Sql[] = [];
    const ac = new AbortController();
    const runs: Promise<unknown>[] = [];
    try {
      const q = keyq(fromPostgresJs(admin), { schema });
      await q.migrate();
      await q.createQueue("jobs");
      await q.ordered("jobs", "w", { slots: 1 }).subscribe();
      const events: LifecycleEvent[] = [];
      const handled: { payload: number; worker: number; at: number }[] = [];
      let release!: () => void;
      const gate = new Promise<void>((r) => (release = r));
      for (let i = 0; i < 2; i++) {
        const sql = postgres(url, { max: 1, onnotice: () => {} });
        conns.push(sql);
        const k = keyq(fromPostgresJs(sql), { schema });
        k.observe({ on: (e) => events.push(e) });
        runs.push(
          k.ordered<number>("jobs", "w", { slots: 1 }).work({
            signal: ac.signal,
            minPollMs: 60_000,
            maxPollMs: 60_000,
            handler: async (ev) => {
              handled.push({ payload: ev.payload, worker: i, at: Date.now() });
              if (ev.payload === 1) await gate; // holds the slot
            },
          }),
        );
      }
      await until("both probes", () => events.filter((e) => e.type === "work.mode").length === 2);
      await until("the first runs", () => events.filter((e) => e.type === "batch.committed").length >= 2);
      await sleep(300);
      await q.send("jobs", { type: "T", payload: 1, key: "a" });
      await until("the first handler", () => handled.length === 1);
      const holder = handled[0]!.worker;
      const woken = events.filter((e) => e.type === "work.woken").length;
      await q.send("jobs", { type: "T", payload: 2, key: "b" }); // same (only) slot, held
      // The other worker wakes for this commit, ticks and finds the slot held.
      await until("the other worker's look", () => events.filter((e) => e.type === "work.woken").length > woken);
      await sleep(200);
      assert.equal(handled.length, 1, "nobody took the event of the held slot yet");
      release();
      await until("the second event, by the holder's look after its COMMIT", () => handled.length === 2, 10_000);
      assert.equal(handled[1]!.payload, 2);
      assert.equal(handled[1]!.worker, holder, "the worker that held the slot looked again");
    } finally {
      loopTuning.fullRunMs = FULL_RUN_MS;
      ac.abort();
      await Promise.all(runs);
      await Promise.all(conns.map((c) => c.end({ timeout: 2 })));
      await admin.end({ timeout: 2 });
      await dropSchema(url, schema);
    }
  });
});
