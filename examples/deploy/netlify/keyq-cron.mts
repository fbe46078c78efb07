/**
 * Netlify: a scheduled function that runs one bounded Tier A run of keyq's
 * "jobs" queue every minute. Put it at `netlify/functions/keyq-cron.mts`;
 * `config.schedule` is the whole setup (docs/deploy/netlify.md). Set
 * DATABASE_URL (KEYQ_SCHEMA is optional) in the site's environment variables.
 *
 * Netlify invokes scheduled functions itself: in production they have no
 * public URL, so there is no secret to check. Tested by
 * tests/deploy.test.ts, which calls the default export like Netlify would:
 *
 *   node --import tsx examples/deploy/netlify/keyq-cron.mts   # (imported by the test, not run)
 */
import postgres from "postgres";
import { keyq } from "keyq";
import { fromPostgresJs } from "keyq/postgres-js";

export default async (request: Request): Promise<Response> => {
  const { next_run } = (await request.json().catch(() => ({}))) as { next_run?: string };
  // deno-lint-ignore no-process-global -- Netlify Functions run on Node
  const env = process.env;
  if (!env.DATABASE_URL) return new Response("set DATABASE_URL in the site's environment variables", { status: 500 });
  const sql = postgres(env.DATABASE_URL, { max: 2, onnotice: () => {} });
  try {
    const q = keyq(fromPostgresJs(sql), { schema: env.KEYQ_SCHEMA });
    await q.migrate(); // idempotent; in production, migrate once at deploy time
    await q.createQueue("jobs");
    const consumed: string[] = [];
    const report = await q.exclusive("jobs", "netlify-cron").run({
      budgetMs: 20_000, // scheduled functions are stopped after 30 s
      handler: (ev) => {
        consumed.push(ev.id);
      },
    });
    console.log(`keyq: ${report.events} events; next run ${next_run ?? "?"}`);
    return Response.json({ report, consumed });
  } finally {
    await sql.end();
  }
};

/** Netlify reads the schedule from here (cron syntax or @hourly, @daily…). */
export const config = { schedule: "* * * * *" };
