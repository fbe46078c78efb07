/**
 * Next.js / Vercel: a cron route handler that runs one bounded Tier A run over
 * Neon's WebSocket Pool and returns the report as JSON. Put it at
 * `app/api/keyq/route.ts` and schedule it in vercel.json:
 *
 *   { "crons": [{ "path": "/api/keyq", "schedule": "* * * * *" }] }
 *
 * Vercel calls it with `Authorization: Bearer $CRON_SECRET`; set CRON_SECRET
 * and DATABASE_URL (KEYQ_SCHEMA is optional). The route fails closed: until
 * CRON_SECRET is set it refuses every call (503), and a call without the
 * secret gets 401. Give DATABASE_URL a role that may only consume "jobs"
 * (docs/roles.md), not the schema owner. The Pool lives for one request only: an edge or
 * serverless function keeps no connection between invocations.
 * Tested by tests/examples.test.ts, which calls GET() like Vercel would.
 */
import { Pool } from "@neondatabase/serverless";
import { keyq } from "keyq";
import { fromNeonPool } from "keyq/neon";

export async function GET(request: Request): Promise<Response> {
  // deno-lint-ignore no-process-global -- Next.js and Vercel expose configuration as process.env
  const env = process.env;
  if (!env.CRON_SECRET) {
    // Fail closed: an unset secret must not open the route to anyone.
    return new Response("CRON_SECRET is not set: this route refuses every call until it is", { status: 503 });
  }
  if (!sameText(request.headers.get("authorization") ?? "", `Bearer ${env.CRON_SECRET}`)) {
    return new Response("unauthorized", { status: 401 });
  }
  const pool = new Pool({ connectionString: env.DATABASE_URL, max: 2 });
  try {
    const q = keyq(fromNeonPool(pool), { schema: env.KEYQ_SCHEMA ?? "keyq" });
    await q.migrate(); // idempotent; in production, migrate once at deploy time
    await q.createQueue("jobs");
    const consumed: { id: string; type: string; key: string | null }[] = [];
    const report = await q.exclusive("jobs", "vercel-cron").run({
      budgetMs: 20_000, // stop well before the function's time limit
      handler: (ev) => {
        consumed.push({ id: ev.id, type: ev.type, key: ev.key });
      },
    });
    return Response.json({ report, consumed });
  } finally {
    await pool.end();
  }
}

/** Compares two strings in time independent of where they differ (no early exit on a secret's first wrong byte). */
function sameText(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}
