// Upgrading a 0.1 schema (tests/fixtures/keyq-0.1.sql, 0.1's migrationSql())
// with the current migrate(): events in flight under 0.1 — sent, ticked or
// not, partly consumed, failed and waiting for a retry — are each delivered
// exactly once afterwards, in send order per key for the ordered consumer; the
// upgraded schema has the shape of a fresh one (the committed snapshot); and
// the function set is re-applied only when its recorded hash differs.
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { keyq, KeyqError } from "../mod.ts";
import { latestVersion } from "../src/engine/migrate.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { functionsHash } from "../src/generated/migrations.ts";
import { catalogDump, SNAPSHOT_PATH } from "../scripts/catalog-dump.ts";
import { connect, dbSkip, type Sql } from "./helpers/db.ts";
import { withSchema } from "./helpers/fixture.ts";

const skip = await dbSkip();
const root = new URL("..", import.meta.url);
const fixture = readFileSync(new URL("tests/fixtures/keyq-0.1.sql", root), "utf8");
const snapshot = readFileSync(new URL(SNAPSHOT_PATH, root), "utf8");

type Ev = { id: string; txid: string; key: string | null; payload: number };
const KEYS = ["a", "b", "c", "d", "e"];

/** Applies the 0.1 script (it has its own BEGIN/COMMIT) on a connection of its own. */
async function install01(url: string, schema: string): Promise<void> {
  const one = connect(url);
  try {
    await one.unsafe(fixture.replaceAll("keyq_fixture_schema", schema));
  } finally {
    await one.end();
  }
}

/** One 0.1-era batch: receive and ack in one transaction, as 0.1's client did. */
async function batch01(
  sql: Sql,
  s: string,
  consumer: string,
  receive: string,
  fail: (e: Ev) => boolean = () => false,
): Promise<Ev[]> {
  return await sql.begin(async (tx) => {
    const [r] = await tx.unsafe(`select ${receive}::text as r`);
    const out = JSON.parse(String(r!.r)) as { slot?: number | null; events: (Ev & { retry: number })[] };
    const failed = out.events.filter(fail);
    const outcome = {
      retried: out.events.filter((e) => e.retry > 0 && !failed.includes(e)).map((e) => e.id),
      failed: failed.map((e) => ({ id: e.id, txid: e.txid, error: { message: "0.1 handler failed" } })),
    };
    await tx.unsafe(`select "${s}".ack('jobs', $1, $2::int, $3::text::jsonb)`, [consumer, out.slot ?? 0, JSON.stringify(outcome)]);
    return out.events.filter((e) => !failed.includes(e));
  }) as Ev[];
}

/** 0.1 state: 3 consumers (plain, exclusive, ordered), 60 events, 40 ticked, some consumed, two failed. */
async function inFlight01(sql: Sql, s: string): Promise<Record<string, Ev[]>> {
  const send = (from: number, n: number) =>
    sql.unsafe(`select "${s}".send_batch('jobs', $1::text::jsonb)`, [JSON.stringify(
      Array.from({ length: n }, (_, i) => ({ type: "T", payload: from + i, key: KEYS[(from + i) % KEYS.length] })),
    )]);
  await sql.unsafe(`select "${s}".create_queue('jobs', '{"retryBase": 0.2, "retryCap": 0.2}'::jsonb)`);
  await sql.unsafe(`select "${s}".subscribe('jobs', 'plain')`);
  await sql.unsafe(`select "${s}".subscribe('jobs', 'excl', 'exclusive')`);
  await sql.unsafe(`select "${s}".subscribe('jobs', 'ord', 'ordered', 4)`);
  await send(0, 40);
  await sql.unsafe(`select "${s}".tick('jobs', true)`);
  await sql.unsafe(`select "${s}".prepare_exclusive('jobs', 'excl', 10)`);
  const done: Record<string, Ev[]> = { plain: [], excl: [], ord: [] };
  done.plain!.push(...await batch01(sql, s, "plain", `"${s}".receive('jobs', 'plain', 15)`, (e) => e.payload === 3));
  done.excl!.push(...await batch01(sql, s, "excl", `"${s}".receive_exclusive('jobs', 'excl', 10)`, (e) => e.payload === 1));
  done.ord!.push(...await batch01(sql, s, "ord", `"${s}".receive_ordered('jobs', 'ord', array[0,1,2,3], 10)`));
  await send(40, 20); // sent, never ticked under 0.1
  return done;
}

/** Consumes with the current client until `want` events were delivered in all (or 30 s). */
async function drain(c: { run: (o: never) => Promise<{ events: number }> }, seen: Ev[], want: number): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (seen.length < want && Date.now() < deadline) {
    const r = await c.run({ maxEvents: 10, budgetMs: 2_000, handler: (ev: Ev) => void seen.push(ev) } as never);
    if (r.events === 0) await new Promise((res) => setTimeout(res, 50));
  }
}

test(
  "0.1 → current: in-flight events of every consumer kind are delivered exactly once, per-key order kept",
  { skip },
  () =>
    withSchema(async ({ url, schema }, defer) => {
      const sql = defer.use(connect(url, { max: 4 }), (s) => s.end({ timeout: 2 }));
      await install01(url, schema);
      const done = await inFlight01(sql, schema);
      for (const name of ["plain", "excl", "ord"]) assert.ok(done[name]!.length > 0, `0.1 consumed some events of ${name}`);
      const [retrying] = await sql.unsafe(`select count(*)::int as n from "${schema}".retry`);
      assert.equal(retrying!.n, 2, "two events failed under 0.1 wait for a retry");
      const q = keyq(fromPostgresJs(sql), { schema });
      const r = await q.migrate();
      assert.equal(r.from, 5, "0.1 recorded versions 1–5");
      assert.deepEqual(r.applied, Array.from({ length: latestVersion - 5 }, (_, i) => i + 6));
      const kinds = { plain: q.consumer("jobs", "plain"), excl: q.exclusive("jobs", "excl"), ord: q.ordered("jobs", "ord", { slots: 4 }) };
      for (const [name, c] of Object.entries(kinds)) {
        const before = done[name]!;
        const after: Ev[] = [];
        await drain(c as never, after, 60 - before.length);
        const all = [...before, ...after].map((e) => Number(e.payload)).sort((a, b) => a - b);
        assert.deepEqual(all, Array.from({ length: 60 }, (_, i) => i), `${name}: every event exactly once`);
        if (name === "ord") {
          for (const k of KEYS) {
            const seq = [...before, ...after].filter((e) => e.key === k).map((e) => Number(e.payload));
            assert.deepEqual(seq, [...seq].sort((a, b) => a - b), `ord: key ${k} in send order`);
          }
        }
      }
      assert.equal(await catalogDump(sql, schema), snapshot, "the upgraded schema has the committed snapshot's shape");
      // 0.1's slot index (on the queue's parent) now has per-table names: a new
      // ordered consumer of the same N builds no twin indexes.
      const slotIndexes = `select string_agg(c.relname, ',' order by c.relname) as names from pg_class c
      where c.relnamespace = '"${schema}"'::regnamespace and c.relkind = 'i' and c.relname like '%slots4'`;
      const [names] = await sql.unsafe(slotIndexes);
      assert.equal(names!.names, "event_1_0_slots4,event_1_1_slots4,event_1_2_slots4");
      await q.ordered("jobs", "ord2", { slots: 4 }).subscribe();
      assert.deepEqual([...await sql.unsafe(slotIndexes)], [names]);
    }, "upgrade"),
);

test("an empty 0.1 schema upgrades to exactly the fresh schema; migrate() again is a no-op", { skip }, () =>
  withSchema(async ({ url, schema }, defer) => {
    const sql = defer.use(connect(url), (s) => s.end({ timeout: 2 }));
    await install01(url, schema);
    const q = keyq(fromPostgresJs(sql), { schema });
    const up = await q.migrate();
    assert.equal(up.functions, "applied", "0.1's function set is replaced");
    assert.equal(await catalogDump(sql, schema), snapshot);
    const procs = `select string_agg(oid::text || ':' || xmin::text, ',' order by oid) as p from pg_proc where pronamespace = '"${schema}"'::regnamespace`;
    const [before] = await sql.unsafe(procs);
    const [set] = await sql.unsafe(`select hash, applied_at::text from "${schema}".function_set`);
    const again = await q.migrate();
    assert.deepEqual(again, { from: latestVersion, to: latestVersion, applied: [], functions: "current" });
    assert.deepEqual([...await sql.unsafe(procs)], [before], "no function re-created");
    assert.deepEqual([...await sql.unsafe(`select hash, applied_at::text from "${schema}".function_set`)], [set]);
    assert.equal(set!.hash, functionsHash);
  }, "upgrade"));

test(
  "a function set whose recorded hash differs is re-applied: changed, missing and stray functions; slot_of kept",
  { skip },
  () =>
    withSchema(async ({ url, schema }, defer) => {
      const sql = defer.use(connect(url), (s) => s.end({ timeout: 2 }));
      const q = keyq(fromPostgresJs(sql), { schema });
      await q.migrate();
      await q.createQueue("jobs");
      await q.ordered("jobs", "ord", { slots: 4 }).subscribe(); // a slot index now depends on slot_of
      const slotOf = `select oid from pg_proc where oid = '"${schema}".slot_of(text, int)'::regprocedure`;
      const [frozen] = await sql.unsafe(slotOf);
      // What a release with an edited function file finds: another hash (of an earlier serial), other functions.
      await sql.unsafe(`update "${schema}".function_set set hash = 'from an older build', serial = serial - 1`);
      await sql.unsafe(`drop function "${schema}".status(text, float8, text, int)`);
      await sql.unsafe(`create function "${schema}".removed_since(x int) returns int language sql as 'select x'`);
      await sql.unsafe(`create or replace function "${schema}".key_budget() returns int language sql as 'select 1'`);
      const r = await q.migrate();
      assert.deepEqual(r.applied, []);
      assert.equal((await q.status()).length, 1, "status() is back");
      const [gone] = await sql.unsafe(`select to_regprocedure('"${schema}".removed_since(int)')::text as f`);
      assert.equal(gone!.f, null, "a function no longer in the set is dropped");
      const [budget] = await sql.unsafe(`select "${schema}".key_budget() as b`);
      assert.ok(Number(budget!.b) > 1, "the edited function is the set's again");
      assert.deepEqual([...await sql.unsafe(slotOf)], [frozen], "slot_of (frozen) is never dropped");
      const [set] = await sql.unsafe(`select hash from "${schema}".function_set`);
      assert.equal(set!.hash, functionsHash);
    }, "upgrade"),
);

test("a function set recorded by a newer keyq is left alone (no downgrade in a rolling deploy)", { skip }, () =>
  withSchema(async ({ url, schema }, defer) => {
    const sql = defer.use(connect(url), (s) => s.end({ timeout: 2 }));
    const q = keyq(fromPostgresJs(sql), { schema });
    await q.migrate();
    await sql.unsafe(`update "${schema}".function_set set hash = 'a newer set', version = '999.0.0'`);
    await sql.unsafe(`create function "${schema}".newer_only() returns int language sql as 'select 1'`);
    await q.migrate();
    const [kept] = await sql.unsafe(`select to_regprocedure('"${schema}".newer_only()')::text as f, hash from "${schema}".function_set`);
    assert.deepEqual({ ...kept }, { f: `"${schema}".newer_only()`.replaceAll('"', ""), hash: "a newer set" });
    // An older recorded version is replaced, as an upgrade is.
    await sql.unsafe(`update "${schema}".function_set set version = '0.0.1'`);
    await q.migrate();
    const [now] = await sql.unsafe(`select to_regprocedure('"${schema}".newer_only()')::text as f, hash from "${schema}".function_set`);
    assert.deepEqual({ ...now }, { f: null, hash: functionsHash });
  }, "upgrade"));

test(
  "function sets of one version are ordered by serial: a later build's set is kept, an equal serial with another hash is refused",
  { skip },
  () =>
    withSchema(async ({ url, schema }, defer) => {
      const sql = defer.use(connect(url), (s) => s.end({ timeout: 2 }));
      const q = keyq(fromPostgresJs(sql), { schema });
      await q.migrate();
      const read = async () => ({ ...(await sql.unsafe(`select hash, serial, applied_at::text as at from "${schema}".function_set`))[0] });
      // A later build of this version (higher serial) recorded its set: this build keeps it.
      await sql.unsafe(`update "${schema}".function_set set hash = 'a later build', serial = serial + 1`);
      await sql.unsafe(`create function "${schema}".later_only() returns int language sql as 'select 1'`);
      const later = await read();
      assert.equal((await q.migrate()).functions, "newer", "migrate() says it left a newer set alone");
      assert.equal((await q.migrate()).functions, "newer");
      assert.deepEqual(await read(), later, "the later build's set is left alone, call after call");
      const [f] = await sql.unsafe(`select to_regprocedure('"${schema}".later_only()')::text as f`);
      assert.ok(f!.f, "its functions stay");
      // Another set with this build's serial: two different builds of one version.
      await sql.unsafe(`update "${schema}".function_set set hash = 'a twin build', serial = serial - 1`);
      const twin = await read();
      await assert.rejects(q.migrate(), (err: unknown) => {
        assert.ok(err instanceof KeyqError, String(err));
        assert.equal(err.code, "FUNCTION_SET_CONFLICT");
        assert.match(err.message, /same serial/);
        return true;
      });
      assert.deepEqual(await read(), twin, "nothing was re-applied");
    }, "upgrade"),
);
