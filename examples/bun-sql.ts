/**
 * Bun: consume keyq's "jobs" queue through Bun's built-in Postgres client
 * (`Bun.SQL`, no driver package), with a Tier A exclusive consumer: one run,
 * then exit. Run it from cron, or in a loop with `work({ signal })`.
 *
 *   DATABASE_URL=postgres://… bun examples/bun-sql.ts
 *
 * KEYQ_SCHEMA picks the schema. In your project: `bun add keyq`.
 */
import process from "node:process";
import { keyq } from "keyq";
import { type BunSqlLike, fromBunSql } from "keyq/bun-sql";

// Bun's global, declared so that the repository's Node type-check accepts this file.
declare const Bun: { SQL: new (url: string, options?: { max?: number }) => BunSqlLike & { close(): Promise<void> } };

const url = process.env.DATABASE_URL;
if (!url) throw new Error("Set DATABASE_URL to the PostgreSQL to consume from, e.g. postgres://user:password@host:5432/db");
const sql = new Bun.SQL(url, { max: 2 });
try {
  const q = keyq(fromBunSql(sql), { schema: process.env.KEYQ_SCHEMA ?? "keyq" });
  await q.migrate(); // idempotent; in production, migrate once at deploy time
  await q.createQueue("jobs");
  const report = await q.exclusive("jobs", "bun-sql").run({
    budgetMs: 20_000,
    handler: async (ev, tx) => {
      // Writes through `tx` commit atomically with the ack.
      const [row] = await tx.query("select now()::text as at");
      console.log(`consumed ${ev.id} ${ev.type} key=${ev.key} payload=${JSON.stringify(ev.payload)} at=${row!.at}`);
    },
  });
  console.log(`run: ${report.events} events in ${report.batches} batches, ${report.ms} ms`);
} finally {
  await sql.close();
}
