// Engine contracts every consumer path relies on, on Postgres and on PGlite:
// the persisted slot count, search_path-independent routing, real event
// counts in status(), and handleBatch only ever called with events.
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import postgres from "postgres";
import { type Keyq, keyq } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { dbSkip } from "./helpers/db.ts";
import { closePGlite, type Fixture, pgFixture, pgliteFixture } from "./helpers/keyq.ts";
import { withFixture } from "./helpers/fixture.ts";
import { scoped } from "./helpers/scope.ts";

const skip = await dbSkip();

after(() => closePGlite());

/** Runs `fn` with a client whose session has `path` as its search_path; on PGlite, the shared session for the call's duration. */
type WithPath = (f: Fixture, path: string, fn: (q: Keyq) => Promise<void>) => Promise<void>;

const targets: { name: string; skip: string | false; make: () => Promise<Fixture>; withPath: WithPath }[] = [
  {
    name: "Postgres",
    skip,
    make: () => pgFixture({ max: 2 }),
    withPath: (f, path, fn) =>
      scoped(async (defer) => {
        const url = (f as Fixture & { url: string }).url;
        const sql = defer.use(postgres(url, { max: 1, idle_timeout: 1, onnotice: () => {}, connection: { search_path: path } }), (s) => s.end());
        await fn(keyq(fromPostgresJs(sql), { schema: f.schema }));
      }),
  },
  {
    name: "PGlite",
    skip: false,
    make: () => pgliteFixture(),
    withPath: (f, path, fn) =>
      scoped(async (defer) => {
        await f.raw(`set search_path = ${path}`);
        defer(() => f.raw("reset search_path"));
        await fn(f.q);
      }),
  },
];

const sends = (n: number) => Array.from({ length: n }, (_, i) => ({ type: "E", payload: i, key: `tenant-${i}` }));

for (const t of targets) {
  describe(`engine contracts on ${t.name}`, () => {
    test("slot count: a handle with another N is refused by batch, run, work, subscribe and slotOf, and consumes nothing", { skip: t.skip }, async () => {
      await withFixture(t.make, async (f) => {
        await f.q.createQueue("files");
        const right = f.q.ordered("files", "idx", { slots: 8 });
        await right.subscribe();
        await f.q.sendBatch("files", sends(16));
        await f.q.tick("files", { force: true });
        const wrong = f.q.ordered("files", "idx", { slots: 4 });
        const code = { code: "SLOT_COUNT_MISMATCH" };
        await assert.rejects(wrong.batch({ handler: () => {} }), code);
        await assert.rejects(wrong.batch({ handleBatch: () => {} }), code);
        await assert.rejects(wrong.slotOf("tenant-1"), code);
        await assert.rejects(wrong.subscribe(), code);
        await assert.rejects(wrong.run({ handler: () => {} }), code);
        await assert.rejects(wrong.work({ handler: () => {}, signal: AbortSignal.timeout(2000) }), code);
        assert.equal(await right.slotOf("tenant-1"), 1);
        const seen: string[] = [];
        await right.run({ handler: (ev) => void seen.push(ev.id) });
        assert.equal(seen.length, 16, "every event still there for the N = 8 handle");
      });
    });

    test("routing ignores the caller's search_path: a hostile % and + first on the path change nothing", { skip: t.skip }, async () => {
      await withFixture(t.make, async (f, defer) => {
        const evil = `${f.schema}_evil`;
        defer(() => f.raw(`drop schema if exists ${evil} cascade`));
        await f.raw(`create schema ${evil}`);
        await f.raw(`create function ${evil}.zero(bigint, int) returns bigint language sql immutable as 'select 0::bigint'`);
        await f.raw(`create operator ${evil}.% (leftarg = bigint, rightarg = int, function = ${evil}.zero)`);
        await f.raw(`create operator ${evil}.+ (leftarg = bigint, rightarg = int, function = ${evil}.zero)`);
        await f.q.createQueue("files");
        const keys = ["tenant-1", "tenant-2", "tenant-3", "tenant-4", "tenant-5", null];
        await f.q.ordered("files", "idx", { slots: 4 }).subscribe();
        await t.withPath(f, `${evil}, public`, async (q) => {
          const [probe] = await f.raw(`select ${evil}.zero(1, 1) as z`);
          assert.equal(Number(probe!.z), 0);
          const c = q.ordered("files", "idx", { slots: 4 });
          const slots = [];
          for (const k of keys) slots.push(await c.slotOf(k));
          assert.deepEqual(slots, [1, 3, 2, 3, 3, 0]);
          await q.sendBatch("files", keys.map((key, i) => ({ type: "E", payload: i, key })));
          const seen: string[] = [];
          await c.run({ handler: (ev) => void seen.push(`${ev.key}@${ev.slot}`) });
          assert.deepEqual(seen.sort(), ["null@0", "tenant-1@1", "tenant-2@3", "tenant-3@2", "tenant-4@3", "tenant-5@3"]);
        });
        // Called directly from a hostile session too (the function inlines into the caller's query).
        await t.withPath(f, `${evil}, public`, async (q) => {
          const [r] = await q.driver.query(`select "${f.schema}".slot_of($1, 4)::text as s`, ["tenant-2"]);
          assert.equal(r!.s, "3");
        });
      });
    });

    test("every engine function pins its search_path (slot_of, which must inline, qualifies every operator)", { skip: t.skip }, async () => {
      await withFixture(t.make, async (f) => {
        const rows = await f.raw(
          `select p.proname as name, p.prosrc as src,
                  exists (select 1 from unnest(coalesce(p.proconfig, '{}')) c where c like 'search\\_path=%') as pinned
             from pg_proc p join pg_namespace n on n.oid = p.pronamespace
            where n.nspname = $1 order by 1`,
          [f.schema],
        );
        assert.ok(rows.length > 40, `engine functions found: ${rows.length}`);
        const unpinned = rows.filter((r) => !r.pinned).map((r) => String(r.name));
        assert.deepEqual(unpinned, ["slot_of"], "only the inlined slot_of may go without a pinned search_path");
        const src = String(rows.find((r) => r.name === "slot_of")!.src);
        const bare = src.replace(/operator\(pg_catalog\.[^)]+\)/g, "").replace(/::pg_catalog\.\w+/g, "");
        assert.equal(/[%+\-*/<>=!~^&|#@]/.test(bare), false, `slot_of uses an unqualified operator: ${src}`);
        assert.equal(/(^|[^.\w])hashtextextended\(/.test(src), false, "hashtextextended is qualified");
      });
    });

    test("status counts real events: deduplicated and rolled-back sends do not inflate eventsSinceTick or lagEvents", { skip: t.skip }, async () => {
      await withFixture(t.make, async (f) => {
        await f.q.createQueue("files");
        await f.q.consumer("files", "audit").subscribe();
        for (let i = 0; i < 5; i++) await f.q.send("files", { type: "E", payload: i, dedupKey: "once" });
        await assert.rejects(
          f.q.transaction(async (tx) => {
            await f.q.send("files", { type: "E", payload: "undone" }, { tx });
            throw new Error("roll back");
          }),
          /roll back/,
        );
        const lag = async () => {
          const [s] = await f.q.status({ queue: "files" });
          return { since: s!.eventsSinceTick, lag: s!.consumers[0]!.cursors[0]!.lagEvents };
        };
        assert.deepEqual(await lag(), { since: 1, lag: 1 });
        await f.q.tick("files", { force: true });
        assert.deepEqual(await lag(), { since: 0, lag: 1 });
        await f.q.sendBatch("files", [{ type: "E", payload: 1 }, { type: "E", payload: 2, dedupKey: "once" }]);
        assert.deepEqual(await lag(), { since: 1, lag: 2 });
        await f.q.tick("files", { force: true });
        assert.deepEqual(await lag(), { since: 0, lag: 2 });
        const seen: string[] = [];
        await f.q.consumer("files", "audit").run({ handler: (ev) => void seen.push(ev.id) });
        assert.equal(seen.length, 2);
        assert.deepEqual(await lag(), { since: 0, lag: 0 });
      });
    });

    test("handleBatch is only called with events (never on an empty look), for every kind", { skip: t.skip }, async () => {
      await withFixture(t.make, async (f) => {
        await f.q.createQueue("files");
        const kinds = [
          f.q.consumer("files", "plain"),
          f.q.exclusive("files", "x"),
          f.q.ordered("files", "o", { slots: 4 }),
        ];
        for (const c of kinds) {
          const sizes: number[] = [];
          const handleBatch = (evs: unknown[]) => {
            if (evs.length === 0) throw new Error("handleBatch called with no events");
            sizes.push(evs.length);
          };
          await c.subscribe();
          const empty = await c.run({ handleBatch, maxBatches: 5 });
          assert.equal(empty.events, 0);
          await f.q.sendBatch("files", sends(3).map((e) => ({ ...e, key: `${c.name}-${e.key}` })));
          const r = await c.run({ handleBatch });
          assert.ok(r.events >= 3, `${c.name}: ${r.events}`);
          assert.ok(sizes.length >= 1 && sizes.every((n) => n > 0), `${c.name}: batch sizes ${sizes.join(", ")}`);
        }
      });
    });
  });
}
