/**
 * AWS Lambda + Amazon EventBridge: a scheduled rule invokes this function
 * every minute; each invocation is one bounded Tier A run of keyq's "jobs"
 * queue. docs/deploy/aws-lambda.md has the SAM template. Set DATABASE_URL
 * (from Secrets Manager or the function's environment; KEYQ_SCHEMA is
 * optional). Keep the function's timeout above `budgetMs` plus one batch.
 *
 * EventBridge invokes the function directly: it has no URL, so there is no
 * secret to check (do not add a function URL to it). Tested by
 * tests/deploy.test.ts, which calls handler() with a scheduled event.
 */
import process from "node:process";
import postgres from "postgres";
import { keyq, type RunReport } from "keyq";
import { fromPostgresJs } from "keyq/postgres-js";

/** The part of EventBridge's "Scheduled Event" this handler reads. */
export interface ScheduledEvent {
  "detail-type": string;
  time: string;
}

export async function handler(event: ScheduledEvent): Promise<RunReport> {
  const url = process.env.DATABASE_URL;
  if (!url) throw new Error("set DATABASE_URL in the function's environment");
  // One client per invocation: a frozen Lambda keeps no healthy connection between invocations.
  const sql = postgres(url, { max: 2, onnotice: () => {} });
  try {
    const q = keyq(fromPostgresJs(sql), { schema: process.env.KEYQ_SCHEMA });
    await q.migrate(); // idempotent; in production, migrate once at deploy time
    await q.createQueue("jobs");
    const report = await q.exclusive("jobs", "lambda-cron").run({
      budgetMs: 40_000, // the template's timeout is 60 s
      handler: (ev) => console.log(`consumed ${ev.id} ${ev.type} key=${ev.key}`),
    });
    console.log(`${event["detail-type"]} at ${event.time}: ${report.events} events in ${report.batches} batches`);
    return report;
  } finally {
    await sql.end();
  }
}
