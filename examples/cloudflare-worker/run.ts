/**
 * Runs the Worker's `scheduled()` once inside the real Workers runtime
 * (workerd, through the `miniflare` package), against a local Postgres:
 * bundles worker.ts with esbuild the way wrangler would (the "workerd"
 * export condition selects postgres.js's `cloudflare:sockets` build), then
 * fires one Cron Trigger. The Worker's console output is printed as it runs.
 *
 *   DATABASE_URL=postgres://… node --import tsx examples/cloudflare-worker/run.ts
 *
 * KEYQ_SCHEMA picks the schema (default keyq).
 */
import { fileURLToPath } from "node:url";
import process from "node:process";
import { build } from "esbuild";
import { Miniflare } from "miniflare";

const bundle = await build({
  entryPoints: [fileURLToPath(new URL("./worker.ts", import.meta.url))],
  bundle: true,
  write: false,
  format: "esm",
  platform: "browser",
  conditions: ["workerd", "worker"],
  external: ["cloudflare:*", "node:*"],
  logLevel: "warning",
});

const mf = new Miniflare({
  modules: true,
  script: bundle.outputFiles[0]!.text,
  compatibilityDate: "2026-04-01",
  compatibilityFlags: ["nodejs_compat"],
  bindings: {
    DATABASE_URL: process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/test",
    KEYQ_SCHEMA: process.env.KEYQ_SCHEMA ?? "keyq",
  },
});
try {
  // A Fetcher with scheduled() (typed by @cloudflare/workers-types, not installed here).
  const worker = (await mf.getWorker()) as unknown as {
    scheduled(options: { cron: string; scheduledTime: Date }): Promise<{ outcome: string }>;
  };
  const result = await worker.scheduled({ cron: "* * * * *", scheduledTime: new Date() });
  console.log(`scheduled() outcome: ${result.outcome}`);
  if (result.outcome !== "ok") process.exitCode = 1;
} finally {
  await mf.dispose();
}
