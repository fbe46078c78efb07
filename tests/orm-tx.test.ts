// The user's own ORM transaction (issue 21): send and sendBatch join a
// Drizzle, Kysely, Prisma (interactive) or Knex transaction, recognised by
// shape (no ORM is a dependency of keyq), and commit or roll back with the
// ORM's own writes. Each ORM is the real package from npm; its database
// object outside a transaction is refused before anything is written.
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";
import pg from "pg";
import { drizzle as drizzlePostgres } from "drizzle-orm/postgres-js";
import { drizzle as drizzlePg } from "drizzle-orm/node-postgres";
import { integer, pgSchema } from "drizzle-orm/pg-core";
import { Kysely, PostgresDialect } from "kysely";
import knexFactory from "knex";
import { PrismaPg } from "@prisma/adapter-pg";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { keyq } from "../mod.ts";
import { dbSkip } from "./helpers/db.ts";
import { pgFixture } from "./helpers/keyq.ts";
import type { PgFixture } from "./helpers/fixture.ts";
import { refused } from "./helpers/refused.ts";

const skip = await dbSkip();
const root = resolve(fileURLToPath(import.meta.url), "../..");

/** A Prisma client generated into .cache (gitignored; generation needs no engine download, see TOOLCHAIN.md). */
async function prismaClient(): Promise<new (o: { adapter: unknown }) => Record<string, unknown> & { $disconnect(): Promise<void> }> {
  const dir = join(root, ".cache", `prisma-${process.pid}`);
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, "schema.prisma"),
    'generator client {\n  provider = "prisma-client"\n  output = "./client"\n}\ndatasource db {\n  provider = "postgresql"\n}\n' +
      'model Order {\n  id Int @id\n  @@map("orders")\n}\n',
  );
  try {
    execFileSync(join(root, "node_modules/.bin/prisma"), ["generate", "--schema", join(dir, "schema.prisma")], {
      cwd: root,
      encoding: "utf8",
      stdio: "pipe",
      env: { ...process.env, PRISMA_SCHEMA_ENGINE_BINARY: process.execPath, PRISMA_ENGINES_CHECKSUM_IGNORE_MISSING: "1", PRISMA_HIDE_UPDATE_MESSAGE: "1" },
    });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string };
    throw new Error(`prisma generate failed: ${e.stdout ?? ""}${e.stderr ?? ""}`);
  }
  try {
    return (await import(join(dir, "client", "client.ts"))).PrismaClient;
  } finally {
    rmSync(dir, { recursive: true, force: true }); // loaded: the files are no longer needed
  }
}

// Generated here, at load time (about 4 s): hooks have a 5 s limit under `bun test`.
const PrismaClient = skip ? undefined : await prismaClient();

/** One ORM: how it writes an order and opens a transaction, and its database object (refused as `tx`). */
interface Orm {
  name: string;
  transaction(fn: (tx: object, insert: (id: number) => Promise<unknown>) => Promise<void>): Promise<void>;
  db: unknown;
  close(): Promise<void>;
}

describe("send and sendBatch join the user's ORM transaction", { skip }, () => {
  let f: PgFixture;
  let pool: pg.Pool;
  const orms: Orm[] = [];
  before(async () => {
    f = await pgFixture({ max: 4 });
    await f.q.createQueue("orders");
    await f.raw(`create table "${f.schema}".orders (id int primary key)`);
    pool = new pg.Pool({ connectionString: f.url, max: 3 });
    const s = f.schema;
    const orders = pgSchema(s).table("orders", { id: integer("id").primaryKey() });
    const dz = drizzlePostgres(f.sql);
    orms.push({
      name: "Drizzle (postgres-js)",
      db: dz,
      close: async () => {},
      transaction: (fn) => dz.transaction((tx) => fn(tx, (id) => tx.insert(orders).values({ id }))),
    });
    const dp = drizzlePg(pool);
    orms.push({
      name: "Drizzle (node-postgres)",
      db: dp,
      close: async () => {},
      transaction: (fn) => dp.transaction((tx) => fn(tx, (id) => tx.insert(orders).values({ id }))),
    });
    const ky = new Kysely<{ orders: { id: number } }>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: f.url, max: 2 }) }) });
    orms.push({
      name: "Kysely",
      db: ky,
      close: () => ky.destroy(),
      transaction: (fn) => ky.transaction().execute((trx) => fn(trx, (id) => trx.withSchema(s).insertInto("orders").values({ id }).execute())),
    });
    const kx = knexFactory({ client: "pg", connection: f.url, pool: { min: 0, max: 2 } });
    orms.push({
      name: "Knex",
      db: kx,
      close: () => kx.destroy(),
      transaction: (fn) => kx.transaction((trx) => fn(trx, (id) => trx.withSchema(s).insert({ id }).into("orders"))),
    });
    const prisma = new PrismaClient!({ adapter: new PrismaPg({ connectionString: f.url, max: 2 }, { schema: s }) }) as unknown as {
      $transaction(fn: (tx: { order: { create(a: unknown): Promise<unknown> } }) => Promise<void>): Promise<void>;
      $disconnect(): Promise<void>;
    };
    orms.push({
      name: "Prisma",
      db: prisma,
      close: () => prisma.$disconnect(),
      transaction: (fn) => prisma.$transaction((tx) => fn(tx, (id) => tx.order.create({ data: { id } }))),
    });
  });
  after(async () => {
    for (const o of orms) await o.close();
    await pool?.end();
    await f?.close();
  });

  const pending = async (): Promise<number> => (await f.q.status({ queue: "orders" }))[0]!.eventsSinceTick;
  const stored = async (ids: number[]): Promise<number> =>
    Number((await f.raw(`select count(*)::int as n from "${f.schema}".orders where id = any($1::int[])`, [`{${ids.join(",")}}`]))[0]!.n);

  let next = 1;
  for (const driver of ["postgres-js", "pg"] as const) {
    test(`commit together and roll back together, every ORM (keyq on ${driver})`, async () => {
      const q = keyq(driver === "pg" ? fromPg(pool) : fromPostgresJs(f.sql), { schema: f.schema });
      for (const orm of orms) {
        const [a, b] = [next++, next++];
        const before = await pending();
        await orm.transaction(async (tx, insert) => {
          await insert(a);
          await q.send("orders", { type: "OrderPlaced", payload: { id: a }, key: String(a) }, { tx });
          await q.sendBatch("orders", [{ type: "OrderPaid", payload: { id: a } }, { type: "OrderShipped", payload: { id: a } }], { tx });
        });
        assert.equal(await stored([a]), 1, `${orm.name}: the order committed`);
        assert.equal(await pending(), before + 3, `${orm.name}: the events committed with it`);
        await assert.rejects(
          orm.transaction(async (tx, insert) => {
            await insert(b);
            await q.send("orders", { type: "OrderPlaced", payload: { id: b } }, { tx });
            await q.sendBatch("orders", [{ type: "OrderPaid", payload: { id: b } }], { tx });
            throw new Error("rollback");
          }),
          /rollback/,
        );
        assert.equal(await stored([b]), 0, `${orm.name}: the order rolled back`);
        assert.equal(await pending(), before + 3, `${orm.name}: the events rolled back with it`);
      }
    });
  }

  test("an ORM's database object outside a transaction is refused before anything is written", async () => {
    const before = await pending();
    const names: string[] = [];
    for (const orm of orms) {
      const err = await refused(f.q.send("orders", { type: "X", payload: null }, { tx: orm.db as object }), "INVALID_INPUT");
      names.push(`${orm.name}: ${/not a transaction|autocommit|pool|driver or database/.test(err.message)}`);
    }
    assert.deepEqual(names, orms.map((o) => `${o.name}: true`));
    assert.equal(await pending(), before);
  });
});
