// The engine under real server settings, subscriptions: subscribe racing
// tick + maintain from other connections, subscribing while producers hold
// transactions open, and the slot index built by racing subscribers.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import type { Consumer } from "../mod.ts";
import { dbSkip } from "./helpers/db.ts";
import { pgFixture } from "./helpers/keyq.ts";
import { withPg } from "./helpers/fixture.ts";
import { events } from "./helpers/events.ts";
import { worker } from "./helpers/sync.ts";

const skip = await dbSkip();

describe("engine under real server settings", () => {
  test("subscribe vs tick + maintain hammered from other connections: every event sent after each subscription is delivered (a loss is told from a delay)", {
    skip,
  }, async () => {
    await withPg({ max: 2 }, async (f, defer) => {
      const hammers = [worker(f.url, f.schema, 0, "kq-hammer"), worker(f.url, f.schema, 1, "kq-hammer")];
      let stop = false;
      const loops: Promise<void>[] = [];
      const stopHammers = async () => {
        stop = true;
        await Promise.allSettled(loops);
      };
      defer(async () => {
        await stopHammers();
        await Promise.all(hammers.map((h) => h.sql.end()));
      });
      await f.q.createQueue("files");
      loops.push((async () => {
        while (!stop) await hammers[0]!.q.tick("files", { force: true });
      })());
      loops.push((async () => {
        while (!stop) await hammers[1]!.q.maintain("files");
      })());
      const rounds = 40;
      const consumers: { c: Consumer; id: string; seen: Set<string> }[] = [];
      for (let i = 0; i < rounds; i++) {
        // Each consumer subscribes while the hammers run; its start tick is its own.
        const c = i % 2 ? f.q.consumer("files", `c${i}`) : f.q.ordered("files", `c${i}`, { slots: 2 + i });
        await c.subscribe();
        const { id } = await f.q.send("files", { type: "Marker", payload: i, key: `m${i}` });
        const seen = new Set<string>();
        for (let tries = 0; tries < 5 && !seen.has(id); tries++) {
          await f.q.tick("files", { force: true });
          await c.run({ handler: (ev) => void seen.add(ev.id) });
        }
        consumers.push({ c, id, seen });
      }
      // The run goes quiet: no more hammering; whatever was only slow arrives now.
      const early = consumers.filter((x) => x.seen.has(x.id)).length;
      await stopHammers();
      await f.q.tick("files", { force: true });
      for (const x of consumers) {
        for (let i = 0; i < 10; i++) {
          const r = await x.c.run({ handler: (ev) => void x.seen.add(ev.id) });
          if (r.events === 0) break;
        }
      }
      const lost = consumers.filter((x) => !x.seen.has(x.id)).map((x) => x.c.name);
      const delayed = consumers.filter((x) => x.seen.has(x.id)).length - early;
      for (const x of consumers) await x.c.unsubscribe();
      const [{ n }] = (await f.raw(`select count(*)::int as n from "${f.schema}".tick`)) as [{ n: number }];
      console.log(
        `subscribe/prune race: ${rounds} subscriptions under a hammering ticker and maintainer: ${early} saw their first event within 5 tries, ` +
          `${delayed} only after the run went quiet (a delay), ${lost.length} never (a loss); ${n} ticks left`,
      );
      assert.deepEqual(lost, [], "consumers that lost an event sent after they subscribed");
    });
  });

  test(
    "subscribing never blocks producers: an open producer transaction, a new ordered consumer, sends from other connections still complete",
    { skip },
    async () => {
      await withPg({ max: 2 }, async (f, defer) => {
        const other = worker(f.url, f.schema, 1, "kq-producer");
        let endHeld: (() => Promise<void>) | undefined;
        let sub: Promise<boolean> | undefined = undefined;
        defer(async () => {
          if (endHeld) await endHeld();
          await sub?.catch(() => {});
          await other.sql.end();
        });
        await f.q.createQueue("files");
        const all = f.q.consumer("files", "all");
        await all.subscribe();
        await f.q.sendBatch("files", events(200));
        // A producer transaction holds the current ring table (ROW EXCLUSIVE) and stays open.
        const held = await f.sql.reserve();
        await held.unsafe("begin");
        endHeld = async () => {
          endHeld = undefined;
          await held.unsafe("commit");
          held.release();
        };
        await held.unsafe(`select "${f.schema}".send('files', 'E', '"held"'::jsonb, 'k-held')`);
        let subscribed = false;
        sub = f.q.ordered("files", "late", { slots: 6 }).subscribe().then((r) => {
          subscribed = true;
          return r;
        });
        await new Promise((res) => setTimeout(res, 300));
        const times: number[] = [];
        for (let i = 0; i < 5; i++) {
          const t0 = performance.now();
          const r = await Promise.race([
            other.q.send("files", { type: "E", payload: i, key: `during-${i}` }),
            new Promise<null>((res) => setTimeout(() => res(null), 5_000)),
          ]);
          assert.notEqual(r, null, `send ${i} from another connection blocked while the consumer subscribed`);
          times.push(performance.now() - t0);
        }
        console.log(`sends while a new ordered consumer waits to subscribe: ${times.map((t) => t.toFixed(1)).join(", ")} ms; subscribed yet: ${subscribed}`);
        await endHeld();
        assert.equal(await Promise.race([sub, new Promise((res) => setTimeout(() => res("timeout"), 60_000))]), true);
        const [{ n }] = (await f.raw(
          `select count(*)::int as n from pg_index x join pg_class c on c.oid = x.indexrelid
          where c.relnamespace = $1::regnamespace and c.relname like 'event\\_%\\_slots6' and x.indisvalid`,
          [f.schema],
        )) as [{ n: number }];
        assert.equal(n, 3, "a valid slot index on each of the 3 ring tables");
        await f.q.sendBatch("files", events(10, 5000));
        const late: string[] = [];
        await f.q.ordered("files", "late", { slots: 6 }).run({ handler: (ev) => void late.push(String(ev.payload)) });
        const after = Array.from({ length: 10 }, (_, i) => String(5000 + i));
        assert.deepEqual(after.filter((p) => !late.includes(p)), [], "every event sent after the subscription");
        const seen = new Set<string>();
        await all.run({ handler: (ev) => void seen.add(ev.id) });
        assert.equal(seen.size, 200 + 1 + 5 + 10, "nothing lost for the existing consumer");
      });
    },
  );

  test("slot index: racing subscribers of one new N behind a producer, and an INVALID index left by a failed concurrent build", { skip }, async () => {
    const f = await pgFixture({ max: 4 });
    const subscribers = Array.from({ length: 3 }, (_, i) => worker(f.url, f.schema, i, "kq-sub"));
    let endHeld: (() => Promise<void>) | undefined;
    const validIndexes = async (n: number) => {
      const [r] = await f.raw(
        `select count(*) filter (where x.indisvalid)::int as valid, count(*)::int as total
           from pg_index x join pg_class c on c.oid = x.indexrelid
          where c.relnamespace = $1::regnamespace and c.relname like $2`,
        [f.schema, `event\\_%\\_slots${n}`],
      );
      return { valid: r!.valid as number, total: r!.total as number };
    };
    try {
      await f.q.createQueue("files");
      await f.q.sendBatch("files", events(100));
      const held = await f.sql.reserve();
      await held.unsafe("begin");
      endHeld = async () => {
        endHeld = undefined;
        await held.unsafe("commit");
        held.release();
      };
      await held.unsafe(`select "${f.schema}".send('files', 'E', '"held"'::jsonb, 'k-held')`);
      const racing = subscribers.map(({ q }, i) => q.ordered("files", `racer-${i}`, { slots: 5 }).subscribe());
      await new Promise((res) => setTimeout(res, 500));
      await endHeld();
      assert.deepEqual(await Promise.all(racing), [true, true, true]);
      assert.deepEqual(await validIndexes(5), { valid: 3, total: 3 });

      // A failed CREATE INDEX CONCURRENTLY leaves an INVALID index behind; mark one so.
      await f.raw(
        `update pg_index set indisvalid = false
          where indexrelid = (select oid from pg_class where relnamespace = $1::regnamespace and relname like 'event\\_%\\_0\\_slots5')`,
        [f.schema],
      );
      assert.deepEqual(await validIndexes(5), { valid: 2, total: 3 });
      assert.equal(await f.q.ordered("files", "after-failure", { slots: 5 }).subscribe(), true);
      assert.deepEqual(await validIndexes(5), { valid: 3, total: 3 }, "the invalid index was rebuilt");
      const seen: number[] = [];
      await f.q.sendBatch("files", events(20, 9000));
      await f.q.ordered<number>("files", "after-failure", { slots: 5 }).run({ handler: (ev) => void seen.push(ev.payload) });
      assert.equal(seen.filter((p) => p >= 9000).length, 20);
    } finally {
      if (endHeld) await endHeld();
      await Promise.all(subscribers.map((w) => w.sql.end()));
      await f.close();
    }
  });
});
