/**
 * Deno: consume keyq's "jobs" queue from a `Deno.cron` schedule, with a Tier A
 * exclusive consumer. Every minute one short run ticks, maintains, and
 * consumes batches until the budget or the backlog runs out. Overlapping runs
 * (or several isolates on Deno Deploy) are safe: at most one of them handles a
 * given key at any instant.
 *
 *   DATABASE_URL=postgres://… deno run --allow-net --allow-env --unstable-cron examples/deno-cron.ts
 *
 * Where `Deno.cron` is unavailable (no --unstable-cron), or with KEYQ_ONCE=1,
 * the job runs once and the script exits. KEYQ_SCHEMA picks the schema.
 * In your project: `deno add jsr:@keyq/keyq npm:postgres` and import from "@keyq/keyq".
 */
import postgres from "postgres";
import { keyq } from "keyq";
import { fromPostgresJs } from "keyq/postgres-js";

// Deno's globals, declared so that the repository's Node type-check accepts this file.
declare const Deno: {
  env: { get(name: string): string | undefined };
  cron?: (name: string, schedule: string, job: () => Promise<void>) => Promise<void>;
};

const url = Deno.env.get("DATABASE_URL") ?? "";
if (!url) throw new Error("Set DATABASE_URL to the PostgreSQL to consume from, e.g. postgres://user:password@host:5432/db");
const schema = Deno.env.get("KEYQ_SCHEMA") ?? "keyq";

async function consumeJobs(): Promise<void> {
  const sql = postgres(url, { max: 2, onnotice: () => {} });
  try {
    const q = keyq(fromPostgresJs(sql), { schema });
    await q.migrate(); // idempotent; in production, migrate once at deploy time
    await q.createQueue("jobs");
    const report = await q.exclusive("jobs", "deno-cron").run({
      budgetMs: 20_000,
      handler: (ev) => console.log(`consumed ${ev.id} ${ev.type} key=${ev.key} payload=${JSON.stringify(ev.payload)}`),
    });
    console.log(`run: ${report.events} events in ${report.batches} batches, ${report.ms} ms`);
  } finally {
    await sql.end();
  }
}

if (typeof Deno.cron === "function" && !Deno.env.get("KEYQ_ONCE")) {
  Deno.cron("keyq jobs", "* * * * *", consumeJobs);
} else {
  await consumeJobs();
}
