// Smoke tests for the driver adapters: the contract in src/driver.ts, against
// real Postgres (postgres.js) and PGlite. Runs under Node, Deno and Bun.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import type { TxDriver } from "../src/driver.ts";
import { databaseUrl, dbSkip, freshSchema } from "./helpers/db.ts";
import { type DriverSpec, driverSpecs } from "./helpers/drivers.ts";

/**
 * The drivers of the one list (tests/helpers/drivers.ts) the contract runs
 * on: postgres.js (real Postgres) and PGlite. `other` reads through a second
 * client (PGlite is one connection: `other` is the same driver).
 */
const targets = driverSpecs.filter((d) => d.id === "postgres-js" || d.id === "pglite");
const pgSkip = await dbSkip();
const skipOf = (spec: DriverSpec): string | false => spec.skip || (spec.id !== "pglite" && pgSkip);

async function setUp(spec: DriverSpec): Promise<{ driver: TxDriver; other: TxDriver; close(): Promise<void> }> {
  const url = spec.id === "pglite" ? "" : (await databaseUrl())!;
  const a = await spec.open(url);
  if (spec.id === "pglite") return { driver: a.driver, other: a.driver, close: a.close };
  const b = await spec.open(url);
  return { driver: a.driver, other: b.driver, close: async () => void (await Promise.all([a.close(), b.close()])) };
}

const KQ_RAISE = `do $$ begin
  raise exception 'Queue "%" does not exist', 'files' using errcode = 'KQ001', hint = 'KEYQ:QUEUE_NOT_FOUND';
end $$`;

for (const target of targets) {
  describe(`driver ${target.id}`, { skip: skipOf(target) }, () => {
    let driver: TxDriver;
    let other: TxDriver;
    let close: () => Promise<void>;
    const schemas: string[] = [];
    const schema = (): string => {
      const s = freshSchema("drv");
      schemas.push(s);
      return s;
    };

    before(async () => {
      ({ driver, other, close } = await setUp(target));
    });
    after(async () => {
      for (const s of schemas) await other?.query(`drop schema if exists ${s} cascade`);
      await close?.();
    });

    test("has a name and a transaction method", () => {
      assert.equal(driver.name, target.id);
      assert.equal(typeof driver.transaction, "function");
    });

    test("query with text params and casts returns plain rows", async () => {
      const rows = await driver.query(
        `select $1::int + 1 as n, $2::text as t, $3::text as z, $4::jsonb ->> 'a' as j,
                $5::timestamptz::text as ts, array_length($6::text[], 1)::text as len, $7::jsonb::text as js`,
        ["41", "héllo 'quoted'", null, '{"a":"b"}', "infinity", "{a,b,c}", '"just a string"'],
      );
      assert.deepEqual(rows.map((r) => ({ ...r })), [
        { n: 42, t: "héllo 'quoted'", z: null, j: "b", ts: "infinity", len: "3", js: '"just a string"' },
      ]);
      assert.equal(Object.getPrototypeOf(rows), Array.prototype, "a plain array");
      assert.equal(Object.getPrototypeOf(rows[0]), Object.prototype, "plain row objects");
      assert.deepEqual(await driver.query("select 1 as x where false", []), []);
    });

    test("multi-statement text without params, with a plpgsql function", async () => {
      const s = schema();
      const rows = await driver.query(`
        create schema ${s};
        create table ${s}.item (id int primary key, label text not null);
        create function ${s}.add_one(x int) returns int language plpgsql as $$
        declare
          y int;  -- a semicolon; inside the body
        begin
          y := x + 1;
          return y;
        end;
        $$;
        insert into ${s}.item values (1, 'a;b'), (2, $q$it's$q$);
        select ${s}.add_one(41)::text as v;
      `);
      assert.deepEqual(rows.map((r) => ({ ...r })), [{ v: "42" }]);
      const items = await driver.query(`select id::text, label from ${s}.item order by id`, []);
      assert.deepEqual(items.map((r) => ({ ...r })), [{ id: "1", label: "a;b" }, { id: "2", label: "it's" }]);
      assert.deepEqual(await driver.query(`create table ${s}.empty (a int); create index on ${s}.empty (a)`), []);
    });

    test("transaction commits on success and rolls back when fn throws", async () => {
      const s = schema();
      await driver.query(`create schema ${s}; create table ${s}.t (v text)`);
      const out = await driver.transaction(async (tx) => {
        await tx.query(`insert into ${s}.t values ($1)`, ["committed"]);
        const seen = await tx.query(`select count(*)::text as n from ${s}.t`, []);
        return seen[0]!.n;
      });
      assert.equal(out, "1");
      await assert.rejects(
        driver.transaction(async (tx) => {
          await tx.query(`insert into ${s}.t values ($1)`, ["rolled back"]);
          throw new Error("handler failed");
        }),
        { message: "handler failed" },
      );
      const rows = await other.query(`select v from ${s}.t order by v`, []);
      assert.deepEqual(rows.map((r) => r.v), ["committed"]);
    });

    test("pg_try_advisory_xact_lock inside a transaction", async () => {
      const key = String(Math.floor(Math.random() * 1e9));
      const got = await driver.transaction(async (tx) => {
        const [r] = await tx.query("select pg_try_advisory_xact_lock($1::bigint) as ok", [key]);
        if (target.id !== "pglite") {
          // Another connection cannot take the lock while this transaction holds it.
          const [o] = await other.query("select pg_try_advisory_xact_lock($1::bigint) as ok", [key]);
          assert.equal(o!.ok, false);
        }
        return r!.ok;
      });
      assert.equal(got, true);
      const [again] = await other.query("select pg_try_advisory_xact_lock($1::bigint) as ok", [key]);
      assert.equal(again!.ok, true, "the lock is released at commit");
    });

    test("engine errors reach the caller with .code and .hint", async () => {
      for (
        const run of [
          () => driver.query(KQ_RAISE),
          () => driver.query(`select 1 as a; ${KQ_RAISE}`),
          () => driver.query(KQ_RAISE, []),
          () => driver.transaction((tx) => tx.query(KQ_RAISE, [])),
        ]
      ) {
        await assert.rejects(run(), (err: { code?: unknown; hint?: unknown; message?: unknown }) => {
          assert.equal(err.code, "KQ001");
          assert.equal(err.hint, "KEYQ:QUEUE_NOT_FOUND");
          assert.equal(err.message, 'Queue "files" does not exist');
          return true;
        });
      }
      // The driver is still usable afterwards.
      assert.deepEqual((await driver.query("select 'ok' as s", [])).map((r) => r.s), ["ok"]);
    });
  });
}
