// Handlers use their ORM on the batch's transaction (issue 21): kyselyDialect
// and drizzleProxy hand keyq's `tx` to the real Kysely and Drizzle; a
// handler's ORM writes commit with the batch, and a failing handler's writes
// roll back with its event (the event is retried), the others' stay.
import assert from "node:assert/strict";
import { test } from "node:test";
import * as kysely from "kysely";
import { drizzle } from "drizzle-orm/pg-proxy";
import { eq } from "drizzle-orm";
import { integer, pgSchema, text } from "drizzle-orm/pg-core";
import pg from "pg";
import { drizzleProxy, keyq, kyselyDialect } from "../mod.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";

const skip = await dbSkip();

interface DB {
  audit: { id: number; path: string; via: string };
}

for (const driver of ["postgres-js", "pg"] as const) {
  test(`handlers write through Kysely and Drizzle on the batch's transaction (keyq on ${driver})`, { skip }, () =>
    withPg(async (f, defer) => {
      const pool = defer.use(new pg.Pool({ connectionString: f.url, max: 2 }), (p) => p.end());
      const q = keyq(driver === "pg" ? fromPg(pool) : fromPostgresJs(f.sql), { schema: f.schema });
      await f.raw(`create table "${f.schema}".audit (id int, path text, via text)`);
      const audit = pgSchema(f.schema).table("audit", { id: integer("id"), path: text("path"), via: text("via") });
      await q.createQueue("files", { maxRetries: 3, retryBase: "1h" });
      const c = q.consumer<{ id: number; path: string }>("files", "audit");
      await c.subscribe();
      await q.sendBatch("files", [1, 2, 3].map((id) => ({ type: "FileCreated", payload: { id, path: `/f${id}` } })));
      const r = await c.run({
        handler: async (ev, tx) => {
          const ky = new kysely.Kysely<DB>({ dialect: kyselyDialect(tx, kysely) });
          await ky.withSchema(f.schema).insertInto("audit").values({ id: ev.payload.id, path: ev.payload.path, via: "kysely" }).execute();
          const dz = drizzle(drizzleProxy(tx));
          await dz.insert(audit).values({ id: ev.payload.id, path: ev.payload.path, via: "drizzle" });
          // Drizzle's typed select reads back this transaction's own write.
          const mine = await dz.select({ path: audit.path, via: audit.via }).from(audit).where(eq(audit.id, ev.payload.id));
          assert.deepEqual(mine.map((m) => m.via).sort(), ["drizzle", "kysely"]);
          if (ev.payload.id === 2) throw new Error("event 2 fails after writing");
        },
      });
      assert.deepEqual([r.events - r.retried, r.retried], [2, 1]);
      const rows = await f.raw(`select id, via from "${f.schema}".audit order by id, via`);
      assert.deepEqual(rows.map((x) => `${x.id} ${x.via}`), ["1 drizzle", "1 kysely", "3 drizzle", "3 kysely"], "event 2's writes rolled back with it");
    }));
}

test("Kysely's own transaction is refused on keyq's; drizzleProxy refuses a select that repeats a column name", async () => {
  const rows: unknown[][] = [];
  const tx = {
    query: (text: string) => (rows.push([text]), Promise.resolve([{ id: 1 }])),
  };
  const ky = new kysely.Kysely<DB>({ dialect: kyselyDialect(tx, kysely) });
  await assert.rejects(ky.transaction().execute(async () => {}), /keyq begins and commits it/);
  const proxy = drizzleProxy(tx);
  await assert.rejects(proxy('select "a"."id", "b"."id" from "a" join "b" on true', [], "all"), /two columns named "id"/);
  assert.deepEqual(await proxy('select "a"."id", "b"."id" as "bid" from "a" join "b" on true', [], "all"), { rows: [[1]] });
  assert.deepEqual(await proxy('insert into "a" ("id") values ($1) returning "id"', [1], "all"), { rows: [[1]] });
  assert.deepEqual(await proxy("update a set id = 1", [], "execute"), { rows: [{ id: 1 }] });
});
