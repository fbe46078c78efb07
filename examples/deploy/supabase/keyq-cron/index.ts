/**
 * Supabase: an Edge Function that pg_cron calls every minute (through pg_net)
 * to run one bounded Tier A run of keyq's "jobs" queue. Deploy it as
 * `supabase/functions/keyq-cron/index.ts` (docs/deploy/supabase.md has the
 * schedule SQL):
 *
 *   supabase secrets set CRON_SECRET=$(openssl rand -hex 32)
 *   supabase functions deploy keyq-cron --no-verify-jwt
 *
 * Fail-closed: until CRON_SECRET is set, every request gets 503; a request
 * without `Authorization: Bearer <CRON_SECRET>` gets 401. The database is
 * SUPABASE_DB_URL (set by Supabase) or DATABASE_URL. KEYQ_SCHEMA picks the
 * schema. Tested by tests/deploy.test.ts, which calls handle() under Deno.
 * In your project's deno.json: "imports": { "keyq": "jsr:@keyq/keyq",
 * "keyq/postgres-js": "jsr:@keyq/keyq/postgres-js", "postgres": "npm:postgres@^3.4" }.
 */
import postgres from "postgres";
import { keyq } from "keyq";
import { fromPostgresJs } from "keyq/postgres-js";

// Deno's globals, declared so that the repository's Node type-check accepts this file.
declare const Deno: {
  env: { get(name: string): string | undefined };
  serve?: (handler: (request: Request) => Promise<Response>) => unknown;
};

/** Constant-time comparison of two strings (the secret check must not leak its length by timing). */
function same(a: string, b: string): boolean {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  let diff = x.length ^ y.length;
  for (let i = 0; i < Math.max(x.length, y.length); i++) diff |= (x[i] ?? 0) ^ (y[i] ?? 0);
  return diff === 0;
}

export async function handle(request: Request): Promise<Response> {
  const secret = Deno.env.get("CRON_SECRET");
  if (!secret) return new Response("CRON_SECRET is not set: this function refuses every request until it is", { status: 503 });
  if (!same(request.headers.get("authorization") ?? "", `Bearer ${secret}`)) return new Response("unauthorized", { status: 401 });
  const url = Deno.env.get("SUPABASE_DB_URL") ?? Deno.env.get("DATABASE_URL");
  if (!url) return new Response("set SUPABASE_DB_URL or DATABASE_URL", { status: 500 });
  // prepare: false works behind Supavisor's transaction mode (port 6543) as well as on a direct connection.
  const sql = postgres(url, { max: 2, prepare: false, onnotice: () => {} });
  try {
    const q = keyq(fromPostgresJs(sql), { schema: Deno.env.get("KEYQ_SCHEMA") });
    await q.migrate(); // idempotent; in production, migrate once at deploy time
    await q.createQueue("jobs");
    const consumed: string[] = [];
    const report = await q.exclusive("jobs", "supabase-cron").run({
      budgetMs: 20_000, // well inside the Edge Function's wall-clock limit
      handler: (ev) => {
        consumed.push(ev.id);
      },
    });
    return Response.json({ report, consumed });
  } finally {
    await sql.end();
  }
}

// Supabase runs the module and serves it; a test imports handle() instead.
if ((import.meta as { main?: boolean }).main && Deno.serve) Deno.serve(handle);
