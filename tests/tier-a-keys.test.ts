// Tier A key work (issue 18): a batch holds only what it reads, buckets follow
// the workload, k handlers per key, and lock scopes shared by consumers. Every
// guarantee is shown with several real connections.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { KeyqError } from "../mod.ts";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";
import { gate, sleep, worker } from "./helpers/sync.ts";

const skip = await dbSkip();

/** Tracks handlers running at once, per key: the maximum seen and the intervals. */
function concurrency() {
  const now = new Map<string, number>();
  const max = new Map<string, number>();
  return {
    enter(key: string) {
      const n = (now.get(key) ?? 0) + 1;
      now.set(key, n);
      max.set(key, Math.max(max.get(key) ?? 0, n));
    },
    leave(key: string) {
      now.set(key, now.get(key)! - 1);
    },
    max,
  };
}

/**
 * One slow batch (`slowMax` events) over 255 keys x 5 events in one window
 * (40 to 115 events per key bucket), three other workers (`otherMax` each)
 * draining while it is stuck; then everything is consumed, each event
 * exactly once. Returns the events of keys the slow batch did not hold that
 * still waited when the others had nothing left to do.
 */
async function slowBatch(slowMax: number, otherMax: number): Promise<number> {
  let otherKeys = -1;
  await withPg({ max: 2 }, async (f, defer) => {
    const ws = Array.from({ length: 4 }, (_, i) => worker(f.url, f.schema, i));
    defer(() => Promise.all(ws.map((w) => w.sql.end())));
    await f.q.createQueue("jobs");
    await f.q.exclusive("jobs", "m").subscribe();
    const N = 1275;
    await f.q.sendBatch("jobs", Array.from({ length: N }, (_, i) => ({ type: "E", payload: i, key: `k${Math.floor(i / 5)}` })));
    await f.q.tick("jobs");
    const handled = new Map<string, number>();
    const count = (id: string) => handled.set(id, (handled.get(id) ?? 0) + 1);
    const stuck = gate();
    const inside = gate();
    let slow: { id: string; key: string | null }[] = [];
    const slowRun = ws[0]!.q.exclusive("jobs", "m").run({
      maxEvents: slowMax,
      maxBatches: 1,
      batchTimeout: "5m",
      handleBatch: async (evs) => {
        slow = evs.map((e) => ({ id: e.id, key: e.key }));
        inside.open();
        await stuck.wait;
        for (const e of evs) count(e.id);
      },
    });
    await inside.wait;
    // Three workers drain whatever they can while the slow batch is stuck.
    await Promise.all(
      ws.slice(1).map(async ({ q }) => {
        const c = q.exclusive("jobs", "m", { deferDelay: 20 });
        for (let idle = 0; idle < 5;) {
          const r = await c.run({ maxEvents: otherMax, budgetMs: 20_000, handler: (ev) => void count(ev.id) });
          if (r.events === 0 && r.deferred === 0) {
            idle++;
            await sleep(30);
          } else idle = 0;
        }
      }),
    );
    const all = await f.raw(`select ev_id::text as id, ev_key as key from "${f.schema}".event`);
    const slowIds = new Set(slow.map((e) => e.id));
    const slowKeys = new Set(slow.map((e) => e.key));
    const waiting = all.filter((e) => !handled.has(String(e.id)) && !slowIds.has(String(e.id)));
    otherKeys = waiting.filter((e) => !slowKeys.has(e.key as string)).length;
    console.log(
      `slow batch (maxEvents ${slowMax}, others ${otherMax}): ${slow.length} events of ${slowKeys.size} keys; while it was stuck, ` +
        `${waiting.length} other events waited, ${otherKeys} of them of keys the slow batch did not hold`,
    );
    stuck.open();
    await slowRun;
    // Everything left is consumed afterwards, each event exactly once.
    for (let idle = 0; idle < 3;) {
      const r = await ws[1]!.q.exclusive("jobs", "m", { deferDelay: 20 }).run({ maxEvents: 100, handler: (ev) => void count(ev.id) });
      if (r.events === 0) {
        idle++;
        await sleep(40);
      } else idle = 0;
    }
    assert.equal(handled.size, N, "every event handled");
    assert.ok([...handled.values()].every((n) => n === 1), "each exactly once");
    assert.ok(slow.length > 0 && slow.length <= slowMax);
  });
  return otherKeys;
}

describe("Tier A: a batch holds only what it reads", () => {
  test("one slow batch: only its own events wait, every other event of the window flows", { skip }, async () => {
    const otherKeys = await slowBatch(120, 25);
    assert.equal(otherKeys, 0, `${otherKeys} events of keys nobody held waited for the slow batch`);
  });

  test("its first bucket too: with maxEvents smaller than a bucket, the bucket's unread rest flows", { skip }, async () => {
    // 20 events a batch, 40 to 115 per bucket: the slow batch's own bucket holds more than it reads.
    const otherKeys = await slowBatch(20, 20);
    assert.equal(otherKeys, 0, `${otherKeys} events of keys nobody held waited for the slow batch`);
  });
});

describe("Tier A: buckets follow the workload", () => {
  test(
    "buckets: 64 set: 32 workers on a backlog of 1,000 keys: every worker is inside a handler at once (unset, see tier-a-growth.test.ts)",
    { skip },
    async () => {
      await withPg({ max: 2 }, async (f, defer) => {
        const W = 32;
        const ws = Array.from({ length: W }, (_, i) => worker(f.url, f.schema, i));
        defer(() => Promise.all(ws.map((w) => w.sql.end())));
        await f.q.createQueue("jobs");
        const opts = { buckets: 64 };
        await f.q.exclusive("jobs", "m", opts).subscribe();
        await f.q.sendBatch("jobs", Array.from({ length: 4000 }, (_, i) => ({ type: "E", payload: i, key: `tenant-${i % 1000}` })));
        await f.q.tick("jobs");
        const inside = new Set<number>();
        const got = new Array<number>(W).fill(0);
        let maxInside = 0;
        let released = false;
        const until = Date.now() + 30_000;
        await Promise.all(ws.map(async ({ q }, w) => {
          const c = q.exclusive("jobs", "m", opts);
          while (!released && Date.now() < until) {
            const r = await c.run({
              maxEvents: 10,
              maxBatches: 1,
              budgetMs: 60_000,
              handler: async () => {
                got[w]!++;
                inside.add(w);
                maxInside = Math.max(maxInside, inside.size);
                // Hold the batch until every worker holds one (or the time is up).
                while (inside.size < W && !released && Date.now() < until) await sleep(20);
                released = true;
              },
            });
            inside.delete(w);
            if (r.events === 0) await sleep(50);
          }
        }));
        console.log(`${W} workers: at most ${maxInside} inside a handler at once; events per worker ${got.join(",")}`);
        assert.equal(maxInside, W, `only ${maxInside} of ${W} workers got work at once`);
        for (const n of got) assert.ok(n > 0, `a worker got no work: ${got.join(",")}`);
      });
    },
  );
});

describe("Tier A: k handlers per key, lock scopes", () => {
  test("perKey: 3 under 16 workers: never more than 3 handlers of a key at once, and 3 are reached", { skip }, async () => {
    await withPg({ max: 2 }, async (f, defer) => {
      const ws = Array.from({ length: 16 }, (_, i) => worker(f.url, f.schema, i));
      defer(() => Promise.all(ws.map((w) => w.sql.end())));
      await f.q.createQueue("jobs");
      const opts = { perKey: 3, deferDelay: 10 };
      await f.q.exclusive("jobs", "m", opts).subscribe();
      const c = concurrency();
      const keys = ["a", "b"];
      let sent = 0;
      let done = 0;
      const producing = (async () => {
        // Many small windows: each is planned while workers hold the earlier ones.
        for (let i = 0; i < 120; i++) {
          await f.q.sendBatch("jobs", keys.map((k) => ({ type: "E", payload: i, key: k })));
          sent += keys.length;
          await f.q.tick("jobs");
          await sleep(5);
        }
      })();
      let producerDone = false;
      void producing.then(() => (producerDone = true));
      await Promise.all(ws.map(async ({ q }) => {
        const h = q.exclusive("jobs", "m", opts);
        for (let idle = 0; idle < 10;) {
          const r = await h.run({
            maxEvents: 1,
            maxBatches: 2,
            handler: async (ev) => {
              c.enter(ev.key!);
              await sleep(40);
              c.leave(ev.key!);
              done++;
            },
          });
          if (r.events === 0 && producerDone && done >= sent) idle++;
          else if (r.events === 0) await sleep(10);
        }
      }));
      await producing;
      const maxima = keys.map((k) => c.max.get(k) ?? 0);
      console.log(`perKey 3, 16 workers: per-key maxima ${keys.map((k, i) => `${k}=${maxima[i]}`).join(" ")}; handled ${done} of ${sent}`);
      assert.equal(done, sent, "every event handled once");
      assert.ok(Math.max(...maxima) <= 3, "never more than 3 at once");
      assert.equal(Math.max(...maxima), 3, "3 at once is reached");
    });
  });

  test("perKey: 3 takes one advisory lock per distinct key of a batch (the shared lock table is not used more)", { skip }, async () => {
    await withPg({ max: 2 }, async (f) => {
      await f.q.createQueue("jobs");
      const c = f.q.exclusive("jobs", "m", { perKey: 3 });
      await c.subscribe();
      await f.q.sendBatch("jobs", Array.from({ length: 30 }, (_, i) => ({ type: "E", payload: i, key: `k${i % 10}` })));
      await f.q.tick("jobs");
      const seen: { events: number; keys: number; locks: number; inFlight: number }[] = [];
      await c.run({
        maxEvents: 30,
        handleBatch: async (evs, { tx }) => {
          // Key locks are 64-bit (objsubid 1); the batch's one in-flight marker of a growing consumer is a pair (objsubid 2).
          const [l] = await tx.query(
            "select count(*) filter (where objsubid = 1)::int as n, count(*) filter (where objsubid = 2)::int as m from pg_locks where locktype = 'advisory' and pid = pg_backend_pid()",
          );
          seen.push({ events: evs.length, keys: new Set(evs.map((e) => e.key)).size, locks: Number(l!.n), inFlight: Number(l!.m) });
        },
      });
      console.log(`perKey 3: ${JSON.stringify(seen)}`);
      assert.equal(seen.reduce((n, b) => n + b.events, 0), 30);
      for (const b of seen) assert.equal(b.locks, b.keys, "one advisory lock per distinct key");
      for (const b of seen) assert.equal(b.inFlight, 1, "and one in-flight marker per batch, whatever perKey is");
    });
  });

  test("lockScope: two consumers of one scope never overlap on a key (without it they do)", { skip }, async () => {
    await withPg({ max: 2 }, async (f, defer) => {
      const ws = Array.from({ length: 8 }, (_, i) => worker(f.url, f.schema, i));
      defer(() => Promise.all(ws.map((w) => w.sql.end())));
      const overlapOf = async (queue: string, scope: string | undefined): Promise<{ overlaps: number; handled: number }> => {
        await f.q.createQueue(queue);
        const names = ["migrate", "reindex"];
        const opts = { deferDelay: 10, ...(scope ? { lockScope: scope } : {}) };
        for (const n of names) await f.q.exclusive(queue, n, opts).subscribe();
        await f.q.sendBatch(queue, Array.from({ length: 120 }, (_, i) => ({ type: "E", payload: i, key: `t${i % 6}` })));
        await f.q.tick(queue);
        const c = concurrency();
        let handled = 0;
        await Promise.all(ws.map(async ({ q }, w) => {
          const h = q.exclusive(queue, names[w % 2]!, opts);
          for (let idle = 0; idle < 4;) {
            const r = await h.run({
              maxEvents: 5,
              handler: async (ev) => {
                c.enter(ev.key!);
                await sleep(5);
                c.leave(ev.key!);
                handled++;
              },
            });
            if (r.events === 0 && r.deferred === 0) {
              idle++;
              await sleep(30);
            } else idle = 0;
          }
        }));
        return { overlaps: [...c.max.values()].filter((m) => m > 1).length, handled };
      };
      const shared = await overlapOf("jobs", "tenant");
      const apart = await overlapOf("other", undefined);
      console.log(`lockScope: keys with overlapping handlers ${shared.overlaps} (shared scope) vs ${apart.overlaps} (own scopes)`);
      assert.equal(shared.handled, 240, "both consumers handled every event");
      assert.equal(apart.handled, 240);
      assert.equal(shared.overlaps, 0, "one scope: no two handlers of a key at once, across consumers");
    });
  });

  test("perKey, lockScope and buckets are checked and persisted; nothing is written on a refusal", { skip }, async () => {
    await withPg({ max: 2 }, async (f) => {
      await f.q.createQueue("jobs");
      const bad: [unknown, string][] = [
        [{ perKey: 0 }, "perKey"],
        [{ perKey: 1.5 }, "perKey"],
        [{ perKey: "2" }, "perKey"],
        [{ perKey: 1000 }, "perKey"],
        [{ lockScope: "" }, "lockScope"],
        [{ lockScope: "a b" }, "lockScope"],
        [{ lockScope: 7 }, "lockScope"],
        [{ buckets: 12 }, "buckets"],
        [{ buckets: 8 }, "buckets"],
        [{ buckets: 512 }, "buckets"],
        [{ perKey: 2, fenced: true }, "fenced"],
      ];
      for (const [o, field] of bad) {
        assert.throws(() => f.q.exclusive("jobs", "m", o as never), (e: unknown) => {
          assert.ok(e instanceof KeyqError, String(e));
          assert.equal(e.code, "INVALID_INPUT");
          assert.match(e.message, new RegExp(field));
          return true;
        });
      }
      const rows = await f.raw(`select count(*)::int as n from "${f.schema}".consumer`);
      assert.equal(rows[0]!.n, 0, "nothing written");
      await f.q.exclusive("jobs", "m", { perKey: 3, lockScope: "tenant", buckets: 32 }).subscribe();
      await f.q.exclusive("jobs", "m", { perKey: 3, lockScope: "tenant", buckets: 32 }).subscribe();
      for (const o of [{ perKey: 2, lockScope: "tenant", buckets: 32 }, { perKey: 3, buckets: 32 }, { perKey: 3, lockScope: "tenant" }]) {
        await assert.rejects(f.q.exclusive("jobs", "m", o).subscribe(), (e: unknown) => {
          assert.ok(e instanceof KeyqError, String(e));
          assert.equal(e.code, "CONSUMER_OPTION_MISMATCH");
          return true;
        });
      }
      const [s] = await f.raw(`select settings from "${f.schema}".consumer`);
      assert.deepEqual(
        [(s!.settings as Record<string, unknown>).perKey, (s!.settings as Record<string, unknown>).lockScope, (s!.settings as Record<string, unknown>).buckets],
        [3, "tenant", 32],
      );
    });
  });
});
