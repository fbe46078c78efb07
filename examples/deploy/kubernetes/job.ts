/**
 * Kubernetes CronJob: each scheduled pod runs this script once — one bounded
 * Tier A run of keyq's "jobs" queue — and exits: 0 when the run worked,
 * 1 when it failed (the Job's backoffLimit then retries it). A pod killed
 * mid-batch (activeDeadlineSeconds, a node drain) loses nothing: the batch
 * rolls back and its events come again. docs/deploy/kubernetes.md has the
 * CronJob manifest.
 *
 *   DATABASE_URL=postgres://… node --import tsx examples/deploy/kubernetes/job.ts
 *
 * KEYQ_SCHEMA picks the schema. Without DATABASE_URL it exits 2 and says so.
 */
import process from "node:process";
import postgres from "postgres";
import { keyq } from "keyq";
import { fromPostgresJs } from "keyq/postgres-js";

const url = process.env.DATABASE_URL;
if (!url) {
  console.error("set DATABASE_URL (in the CronJob: from a Secret, see docs/deploy/kubernetes.md)");
  process.exit(2);
}
const sql = postgres(url, { max: 2, onnotice: () => {} });
try {
  const q = keyq(fromPostgresJs(sql), { schema: process.env.KEYQ_SCHEMA });
  await q.migrate(); // idempotent; or run `keyq migrate` in an init container
  await q.createQueue("jobs");
  const report = await q.exclusive("jobs", "k8s-cron").run({
    budgetMs: 50_000, // the manifest's activeDeadlineSeconds is 120
    handler: (ev) => console.log(`consumed ${ev.id} ${ev.type} key=${ev.key} payload=${JSON.stringify(ev.payload)}`),
  });
  console.log(`run: ${report.events} events in ${report.batches} batches, ${report.ms} ms`);
} catch (err) {
  console.error(err);
  process.exitCode = 1;
} finally {
  await sql.end();
}
