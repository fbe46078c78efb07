// A fenced consumer leases on a second connection while its batch's
// transaction holds one, so a one-connection driver would wait until the
// deadline: keyq refuses it when the consumer is made. The adapters say how
// many connections their client opens (built here unconnected: no database).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { Client as NeonClient, Pool as NeonPool } from "@neondatabase/serverless";
import pg from "pg";
import postgres from "postgres";
import { type Driver, keyq } from "../../mod.ts";
import { type BunSqlLike, fromBunSql } from "../../src/drivers/bun-sql.ts";
import { fromNeonClient, fromNeonPool } from "../../src/drivers/neon.ts";
import { fromPg } from "../../src/drivers/pg.ts";
import { fromPGlite } from "../../src/drivers/pglite.ts";
import { fromPostgresJs } from "../../src/drivers/postgres-js.ts";
import { refused } from "../helpers/refused.ts";

const URL = "postgres://postgres@127.0.0.1:5432/test";

function fake(connections: number | undefined): Driver {
  return { name: "fake", connections, query: () => Promise.reject(new Error("no database here")) };
}

describe("fenced consumers and the driver's connection count", () => {
  test("a one-connection driver refuses fenced exclusive and ordered consumers with INVALID_INPUT, naming the fix", async () => {
    const q = keyq(fake(1), { schema: "kq_fenced" });
    const a = await refused(() => q.exclusive("jobs", "w", { fenced: true }), "INVALID_INPUT");
    assert.equal(a.details.field, "fenced");
    assert.equal(a.details.connections, 1);
    assert.match(a.message, /fenced.*at least 2 connections.*the fake driver has 1.*max: 2 or more/);
    const b = await refused(() => q.ordered("jobs", "w", { slots: 2, fenced: true }), "INVALID_INPUT");
    assert.equal(b.details.field, "fenced");
  });

  test("two connections, an unknown count, or no fencing: the consumer is made", () => {
    for (const n of [2, 10, undefined]) {
      const q = keyq(fake(n), { schema: "kq_fenced" });
      assert.equal(q.exclusive("jobs", "w", { fenced: true }).name, "w");
      assert.equal(q.ordered("jobs", "w", { slots: 2, fenced: true }).slots, 2);
    }
    const one = keyq(fake(1), { schema: "kq_fenced" });
    assert.equal(one.exclusive("jobs", "w").name, "w");
    assert.equal(one.ordered("jobs", "w", { slots: 2 }).slots, 2);
  });

  test("each adapter reports its client's pool size: postgres.js, pg, Neon, PGlite, Bun.SQL", async () => {
    const sqls = [postgres(URL, { max: 1 }), postgres(URL, { max: 4 }), postgres(URL)];
    const pools = [new pg.Pool({ connectionString: URL, max: 3 }), new pg.Pool({ connectionString: URL })];
    try {
      assert.deepEqual(sqls.map((s) => fromPostgresJs(s).connections), [1, 4, 10]);
      assert.deepEqual(pools.map((p) => fromPg(p).connections), [3, 10]);
      assert.equal(fromPg(new pg.Client(URL)).connections, 1);
      assert.equal(fromNeonPool(new NeonPool({ connectionString: URL, max: 2 })).connections, 2);
      assert.equal(fromNeonClient(new NeonClient(URL)).connections, 1);
      assert.equal(fromPGlite({} as never).connections, 1);
      const Bun = (globalThis as { Bun?: { SQL: new (url: string, o?: { max?: number }) => BunSqlLike & { close(): Promise<void> } } }).Bun;
      if (Bun) {
        const one = new Bun.SQL(URL, { max: 1 });
        assert.equal(fromBunSql(one).connections, 1);
        await one.close();
      }
      await refused(() => keyq(fromPostgresJs(sqls[0]!)).exclusive("jobs", "w", { fenced: true }), "INVALID_INPUT");
      await refused(() => keyq(fromPg(new pg.Client(URL))).ordered("jobs", "w", { slots: 1, fenced: true }), "INVALID_INPUT");
      assert.equal(keyq(fromPostgresJs(sqls[1]!)).exclusive("jobs", "w", { fenced: true }).name, "w");
    } finally {
      await Promise.all([...sqls.map((s) => s.end()), ...pools.map((p) => p.end())]);
    }
  });
});
