// Driver adapters pg, Neon (WebSocket Pool/Client, HTTP) and Bun.SQL against a
// real Postgres. Runs unchanged under `node --import tsx --test`, `deno test
// --allow-all` and `bun test`. Neon goes through local stand-ins of its
// WebSocket proxy and HTTP endpoint (tests/helpers/neon-*.ts).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import process from "node:process";
import pg from "pg";
import { Client as NeonClient, neon, neonConfig, Pool as NeonPool } from "@neondatabase/serverless";
import type { Driver } from "../src/driver.ts";
import { fromDatabaseError, KeyqError } from "../src/errors.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { fromNeonClient, fromNeonHttp, fromNeonPool } from "../src/drivers/neon.ts";
import { type BunSqlLike, fromBunSql } from "../src/drivers/bun-sql.ts";
import { configureNeon, type NeonProxy, startNeonProxy } from "./helpers/neon-proxy.ts";
import { configureNeonHttp, type NeonHttpShim, startNeonHttpShim } from "./helpers/neon-http-shim.ts";

const DATABASE_URL = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const BunGlobal = (globalThis as { Bun?: { SQL: new (url: string) => BunSqlLike & { close(): Promise<void> } } }).Bun;

let admin: pg.Pool; // a separate connection to check what others see
let proxy: NeonProxy;
let shim: NeonHttpShim;
const restores: (() => void)[] = [];

before(async () => {
  admin = new pg.Pool({ connectionString: DATABASE_URL, max: 2 });
  proxy = await startNeonProxy();
  shim = await startNeonHttpShim();
  restores.push(configureNeon(neonConfig, proxy.port), configureNeonHttp(neonConfig, shim.url));
});

after(async () => {
  while (restores.length) restores.pop()!();
  await Promise.all([proxy?.stop(), shim?.stop()]);
  await admin?.end();
});

/** Runs `fn` with a fresh schema (random name), dropped afterwards. */
async function withSchema(fn: (schema: string) => Promise<void>): Promise<void> {
  const schema = `kq_drv_${randomUUID().replaceAll("-", "").slice(0, 12)}`;
  await admin.query(`create schema ${schema}; create table ${schema}.t (x text)`);
  try {
    await fn(schema);
  } finally {
    await admin.query(`drop schema ${schema} cascade`);
  }
}

const seen = async (schema: string): Promise<string[]> => (await admin.query(`select x from ${schema}.t order by x`)).rows.map((r) => r.x as string);
const tryLock = async (key: string): Promise<boolean> => (await admin.query("select pg_try_advisory_xact_lock($1::bigint) as ok", [key])).rows[0].ok as boolean;
const randomKey = (): string => String(Math.floor(Math.random() * 2 ** 40));
const RAISE = "do $$ begin raise exception 'queue missing' using errcode = 'KQ001', hint = 'KEYQ:QUEUE_NOT_FOUND'; end $$";

function assertKeyqError(err: unknown): true {
  const e = err as { code?: unknown; hint?: unknown; message?: unknown };
  assert.equal(e.code, "KQ001");
  assert.equal(e.hint, "KEYQ:QUEUE_NOT_FOUND");
  assert.match(String(e.message), /queue missing/);
  const mapped = fromDatabaseError(err);
  assert.ok(mapped instanceof KeyqError);
  assert.equal(mapped.code, "QUEUE_NOT_FOUND");
  return true;
}

type Opened = { driver: Driver; close(): void | Promise<void> };

interface Cell {
  open(): Opened | Promise<Opened>;
  skip?: string | false;
  http?: boolean; // Neon HTTP: no transactions, no multi-statement text
  single?: boolean; // one connection: transactions take turns
  pooled?: boolean; // a pool: a connection that breaks is discarded
  via?: () => number; // traffic through the local Neon stand-in, to prove it was used
}

const cells: Record<string, Cell> = {
  "pg Pool": {
    pooled: true,
    open: () => {
      const pool = new pg.Pool({ connectionString: DATABASE_URL, max: 3 });
      return { driver: fromPg(pool), close: () => pool.end() };
    },
  },
  "pg Client": {
    single: true,
    open: async () => {
      const client = new pg.Client(DATABASE_URL);
      await client.connect();
      return { driver: fromPg(client), close: () => client.end() };
    },
  },
  "Neon Pool (WebSocket)": {
    pooled: true,
    via: () => proxy.connections,
    open: () => {
      const pool = new NeonPool({ connectionString: DATABASE_URL, max: 3 });
      return { driver: fromNeonPool(pool), close: () => pool.end() };
    },
  },
  "Neon Client (WebSocket)": {
    single: true,
    via: () => proxy.connections,
    open: async () => {
      const client = new NeonClient(DATABASE_URL);
      await client.connect();
      return { driver: fromNeonClient(client), close: () => client.end() };
    },
  },
  "Neon HTTP": {
    http: true,
    via: () => shim.requests,
    open: () => ({ driver: fromNeonHttp(neon(DATABASE_URL)), close: () => {} }),
  },
  "Bun.SQL": {
    pooled: true,
    skip: !BunGlobal && "Bun.SQL is a global of the Bun runtime only",
    open: () => {
      const sql = new BunGlobal!.SQL(DATABASE_URL);
      return { driver: fromBunSql(sql), close: () => sql.close() };
    },
  },
};

for (const [name, cell] of Object.entries(cells)) {
  describe(name, () => {
    let driver: Driver;
    let close: Opened["close"] | undefined;
    const skip = cell.skip || false;
    const it = (title: string, fn: () => void | Promise<void>) => test(title, { skip }, fn);
    before(async () => {
      if (skip) return;
      ({ driver, close } = await cell.open());
    });
    after(async () => {
      await close?.();
    });

    it("runs a query with text params and casts", async () => {
      const rows = await driver.query(
        "select $1::text as a, ($2::int + 1)::text as n, $3::text as z, ($4::jsonb ->> 'k') as j",
        ["héllo", "41", null, '{"k":"v"}'],
      );
      assert.deepEqual(rows, [{ a: "héllo", n: "42", z: null, j: "v" }]);
      assert.deepEqual([...(await driver.query("select 'x'::text as x where false"))], []);
      if (cell.via) assert.ok(cell.via() > 0, "went through the local Neon stand-in");
    });

    it("binds JSON text to $n::json and $n::jsonb as a document, not a JSON string", async () => {
      const doc = '{"k":"v","n":[1,2]}';
      const rows = await driver.query(
        `select jsonb_typeof($1::jsonb) as t, $1::jsonb ->> 'k' as k, json_typeof($2::json) as u,
                ($3::jsonb)::text as s, $4 :: JSONB #>> '{n,1}' as n`,
        [doc, "[1]", JSON.stringify("str"), doc],
      );
      assert.deepEqual(rows, [{ t: "object", k: "v", u: "array", s: '"str"', n: "2" }]);
    });

    if (cell.http) {
      it("rejects multi-statement text with a clear error (Neon HTTP runs one prepared statement)", async () => {
        await withSchema(async (schema) => {
          await assert.rejects(
            driver.query(`insert into ${schema}.t values ('a'); insert into ${schema}.t values ('b')`),
            (err: Error & { code?: string }) => {
              assert.match(err.message, /several statements/);
              assert.equal(err.code, "42601");
              return true;
            },
          );
          assert.deepEqual(await seen(schema), []);
        });
      });
      it("(shim) runs neon()'s non-interactive sql.transaction batches atomically", async () => {
        const sql = neon(DATABASE_URL);
        await withSchema(async (schema) => {
          const [a, b] = await sql.transaction([
            sql.query(`insert into ${schema}.t values ($1) returning x`, ["one"]),
            sql.query("select $1::text as y", ["two"]),
          ]);
          assert.deepEqual([a, b], [[{ x: "one" }], [{ y: "two" }]]);
          await assert.rejects(
            sql.transaction([sql.query(`insert into ${schema}.t values ('two')`), sql.query(RAISE)]),
            { code: "KQ001", hint: "KEYQ:QUEUE_NOT_FOUND" },
          );
          assert.deepEqual(await seen(schema), ["one"]);
        });
      });
      it("(shim) converts values to JSON without Neon-Raw-Text-Output, as Neon does", async () => {
        const res = await fetch(shim.url, {
          method: "POST",
          headers: { "Neon-Connection-String": DATABASE_URL, "content-type": "application/json" },
          body: JSON.stringify({ query: `select 1::int as n, true as b, '{"a":1}'::jsonb as j, $1::text as s`, params: ["x"] }),
        });
        const body = await res.json() as { rows: unknown; command: string; rowCount: number };
        assert.deepEqual([body.rows, body.command, body.rowCount], [[{ n: 1, b: true, j: { a: 1 }, s: "x" }], "SELECT", 1]);
      });
      it("has no transaction member", () => {
        assert.equal("transaction" in driver, false);
        assert.equal(driver.transaction, undefined);
      });
    } else {
      it("runs multi-statement text without params, returning the last statement's rows", async () => {
        await withSchema(async (schema) => {
          const rows = await driver.query(
            `create table ${schema}.m (x int); insert into ${schema}.m values (1), (2);
             select count(*)::text as n from ${schema}.m`,
          );
          assert.deepEqual(rows, [{ n: "2" }]);
          assert.deepEqual(await driver.query(`drop table ${schema}.m; create table ${schema}.m2 (y int)`), []);
        });
      });
    }

    if (!cell.http) {
      it("commits a transaction (seen from another connection)", async () => {
        await withSchema(async (schema) => {
          const out = await driver.transaction!(async (tx) => {
            await tx.query(`insert into ${schema}.t values ($1)`, ["committed"]);
            assert.deepEqual(await seen(schema), [], "not visible before commit");
            return (await tx.query(`select count(*)::text as n from ${schema}.t`))[0]!.n;
          });
          assert.equal(out, "1");
          assert.deepEqual(await seen(schema), ["committed"]);
        });
      });

      it("rolls back when the callback throws, rethrowing its error", async () => {
        await withSchema(async (schema) => {
          const boom = new Error("boom");
          await assert.rejects(
            driver.transaction!(async (tx) => {
              await tx.query(`insert into ${schema}.t values ($1)`, ["rolled back"]);
              throw boom;
            }),
            (err) => err === boom,
          );
          assert.deepEqual(await seen(schema), []);
          await driver.transaction!((tx) => tx.query(`insert into ${schema}.t values ('after')`));
          assert.deepEqual(await seen(schema), ["after"]);
        });
      });

      it("holds pg_try_advisory_xact_lock until commit", async () => {
        const key = randomKey();
        await driver.transaction!(async (tx) => {
          const [row] = await tx.query("select pg_try_advisory_xact_lock($1::bigint)::text as ok", [key]);
          assert.equal(row!.ok, "true");
          assert.equal(await tryLock(key), false, "another connection cannot take it meanwhile");
          await tx.query("select pg_sleep(0.05)");
          assert.equal(await tryLock(key), false);
        });
        assert.equal(await tryLock(key), true, "released at commit");
      });

      it("passes SQLSTATE and hint through a transaction", async () => {
        await assert.rejects(driver.transaction!((tx) => tx.query(RAISE)), assertKeyqError);
        assert.deepEqual(await driver.query("select 'ok'::text as s"), [{ s: "ok" }]);
      });
    }

    it("passes SQLSTATE KQ001 and hint KEYQ:QUEUE_NOT_FOUND to the caller", async () => {
      await assert.rejects(driver.query(RAISE), assertKeyqError);
      await assert.rejects(driver.query("select $1::int", ["x"]), { code: "22P02" });
    });

    if (cell.pooled) {
      it("survives a connection that breaks inside a transaction (the pool discards it)", async () => {
        for (let round = 0; round < 2; round++) {
          await assert.rejects(
            driver.transaction!((tx) => tx.query("select pg_terminate_backend(pg_backend_pid())")),
            { code: "57P01" },
          );
          const [row] = await driver.transaction!((tx) => tx.query("select 'ok'::text as s"));
          assert.deepEqual(row, { s: "ok" });
        }
      });
    }

    if (cell.single) {
      it("serialises concurrent transactions on its one connection", async () => {
        await withSchema(async (schema) => {
          const one = (x: string) =>
            driver.transaction!(async (tx) => {
              await tx.query(`insert into ${schema}.t values ($1)`, [x]);
              await tx.query("select pg_sleep(0.02)");
              if (x === "b") throw new Error("b fails");
            });
          const results = await Promise.allSettled([one("a"), one("b"), one("c"), driver.query("select 1")]);
          assert.deepEqual(results.map((r) => r.status), ["fulfilled", "rejected", "fulfilled", "fulfilled"]);
          assert.deepEqual(await seen(schema), ["a", "c"]);
        });
      });
    }
  });
}

test("configureNeon and configureNeonHttp put neonConfig back exactly", () => {
  const snapshot = { ...neonConfig.opts };
  const undoProxy = configureNeon(neonConfig, 1);
  const undoHttp = configureNeonHttp(neonConfig, "http://127.0.0.1:1/sql");
  assert.equal(neonConfig.fetchEndpoint, "http://127.0.0.1:1/sql");
  assert.equal(neonConfig.pipelineConnect, false);
  undoHttp();
  undoProxy();
  assert.deepEqual({ ...neonConfig.opts }, snapshot);
});
