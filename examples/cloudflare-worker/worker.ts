/**
 * Cloudflare Workers: a Cron Trigger consumes keyq's "jobs" queue with a Tier A
 * exclusive consumer. postgres.js connects over `cloudflare:sockets` (its
 * "workerd" build, picked by the bundler); one client per invocation, closed
 * before the handler returns. Overlapping invocations are safe: at most one
 * of them handles a given key at any instant.
 *
 *   npx wrangler deploy                          # with wrangler.toml beside this file;
 *   npx wrangler secret put DATABASE_URL         # (or a Hyperdrive binding's connectionString)
 *   node --import tsx examples/cloudflare-worker/run.ts   # locally: scheduled() inside workerd (miniflare)
 *
 * In your project: `npm install keyq postgres`.
 */
import postgres from "postgres";
import { keyq } from "keyq";
import { fromPostgresJs } from "keyq/postgres-js";

/** The Worker's bindings (wrangler.toml `[vars]`, secrets). */
export interface Env {
  DATABASE_URL: string;
  KEYQ_SCHEMA?: string;
}

/** What the runtime passes to `scheduled` (a subset of @cloudflare/workers-types). */
interface ScheduledController {
  readonly cron: string;
  readonly scheduledTime: number;
}

export default {
  async scheduled(controller: ScheduledController, env: Env): Promise<void> {
    const sql = postgres(env.DATABASE_URL, { max: 2, onnotice: () => {} });
    try {
      const q = keyq(fromPostgresJs(sql), { schema: env.KEYQ_SCHEMA ?? "keyq" });
      await q.migrate(); // idempotent; in production, migrate once at deploy time
      await q.createQueue("jobs");
      const report = await q.exclusive("jobs", "cf-cron").run({
        budgetMs: 20_000, // well inside a Cron Trigger's CPU and wall-clock limits
        handler: (ev) => console.log(`consumed ${ev.id} ${ev.type} key=${ev.key} payload=${JSON.stringify(ev.payload)}`),
      });
      console.log(`cron "${controller.cron}": ${report.events} events in ${report.batches} batches, ${report.ms} ms`);
    } finally {
      await sql.end();
    }
  },
};
