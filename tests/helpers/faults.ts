/**
 * The harness of the fault tests (tests/faults*.test.ts): a PRIVATE cluster
 * (tests/helpers/cluster.ts) started by `faultHooks()`, the drivers of the
 * one list that run faults, a side connection that survives restarts, and a
 * migrated schema per test. The shared server on 5432 is never touched.
 *
 * @example
 * ```ts
 * import { drivers, faultHooks, noCluster, withSetup } from "./helpers/faults.ts";
 * faultHooks();
 * for (const d of drivers) test(d.label, { skip: noCluster || d.skip }, () => withSetup(d, async () => {}));
 * ```
 */
import { after, before } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import postgres from "postgres";
import { keyq } from "../../mod.ts";
import { fromPostgresJs } from "../../src/drivers/postgres-js.ts";
import { type Cluster, pgBinDir, startCluster } from "./cluster.ts";
import { freshSchema } from "./db.ts";
import { type DriverSpec, driverSpecs, type Opened, runtimeName, teardownNeon } from "./drivers.ts";
import { type Defer, scoped } from "./scope.ts";
import { sleep, terminate } from "./sync.ts";

export const runtime = runtimeName();
export let noCluster: string | false = false;
try {
  pgBinDir();
} catch (err) {
  noCluster = (err as Error).message;
  if (process.env.CI) throw err; // CI must never skip the fault tests
}

/** The drivers of the one list (tests/helpers/drivers.ts) that the fault tests run, opened for faults. */
export type FaultDriver = DriverSpec & { faults: { reconnects: boolean } };
export const drivers = driverSpecs.filter((d): d is FaultDriver => d.faults !== undefined);
export const open = (d: FaultDriver, url: string) => d.open(url, { faults: true });

export let cluster: Cluster | undefined;
let admin: postgres.Sql | undefined;
export const crashes: unknown[] = [];
const onCrash = (err: unknown) => void crashes.push(err);

/** Starts the private cluster before the file's tests and destroys it after them; records crashes meanwhile. */
export function faultHooks(): void {
  before(async () => {
    if (noCluster) return;
    cluster = await startCluster();
    admin = postgres(cluster.url, { max: 2, idle_timeout: 2, connect_timeout: 5, onnotice: () => {} });
    process.on("uncaughtException", onCrash);
    process.on("unhandledRejection", onCrash);
  });

  after(async () => {
    if (Object.keys(restartTimes).length) console.log(`faults: server restart → first event handled (ms): ${JSON.stringify(restartTimes)}`);
    process.off("uncaughtException", onCrash);
    process.off("unhandledRejection", onCrash);
    await admin?.end({ timeout: 1 });
    await teardownNeon();
    await cluster?.destroy();
  });
}

/** Runs `text` on the side connection, retrying while the server restarts. */
export async function side(text: string, params: (string | number | null)[] = []): Promise<Record<string, unknown>[]> {
  for (let i = 0;; i++) {
    try {
      return [...(await admin!.unsafe(text, params as never[]))];
    } catch (err) {
      if (i >= 100) throw err;
      await sleep(100);
    }
  }
}

/** A migrated schema with queue "jobs", exclusive consumer "w" (subscribed) and a `done` table. */
async function setup(): Promise<{ schema: string; sent: (n: number, keyOf: (i: number) => string) => Promise<string[]> }> {
  const schema = freshSchema("kf");
  const q = keyq(fromPostgresJs(admin!), { schema });
  await q.migrate();
  await q.createQueue("jobs", { retryBase: 50, retryCap: 200 });
  // Consumers start at "latest": "w" exists before anything is sent.
  await q.exclusive("jobs", "w").subscribe();
  await side(`create table "${schema}".done (ev_id bigint, key text, worker int)`);
  let n = 0;
  return {
    schema,
    sent: async (count, keyOf) => {
      const out = await q.sendBatch("jobs", Array.from({ length: count }, () => ({ type: "E", payload: n, key: keyOf(n++) })));
      return out.map((o) => o.id);
    },
  };
}

async function drop(schema: string): Promise<void> {
  await side(`drop schema if exists "${schema}" cascade`);
}

/** `setup()` for the body; the schema is dropped after the body's own cleanups (close clients with `client()`). */
export function withSetup<T>(
  d: FaultDriver,
  body: (s: Awaited<ReturnType<typeof setup>>, client: () => Promise<Opened>, defer: Defer) => Promise<T>,
): Promise<T> {
  return scoped(async (defer) => {
    const s = await setup();
    defer(() => drop(s.schema));
    const client = async () => {
      const opened = await open(d, cluster!.url);
      defer(() => opened.close());
      return opened;
    };
    return await body(s, client, defer);
  });
}

/** Kills `pid` from the side connection and waits until it is gone. */
export const kill = (pid: unknown): Promise<void> => terminate(side, String(pid));

export async function doneStats(schema: string): Promise<{ n: number; d: number }> {
  const [r] = await side(`select count(*)::int as n, count(distinct ev_id)::int as d from "${schema}".done`);
  return { n: Number(r!.n), d: Number(r!.d) };
}

/** Runs batches on fresh clients until `want` events are committed. */
export async function finish(d: FaultDriver, schema: string, want: number, ms = 20_000): Promise<void> {
  const until = Date.now() + ms;
  await scoped(async (defer) => {
    const { driver, close } = await open(d, cluster!.url);
    defer(close);
    const c = keyq(driver, { schema }).exclusive("jobs", "w", { deferDelay: 20 });
    while ((await doneStats(schema)).d < want) {
      assert.ok(Date.now() < until, `only ${(await doneStats(schema)).d} of ${want} events committed`);
      await c.run({
        budgetMs: 2_000,
        handler: async (ev, tx) => void (await tx.query(`insert into "${schema}".done values ($1::bigint, $2, 9)`, [ev.id, ev.key])),
      }).catch(() => {});
      await sleep(50);
    }
  });
}

/** True when two [start, end] intervals of the list overlap. */
export function overlaps(intervals: { start: number; end: number }[]): number {
  let n = 0;
  for (let i = 0; i < intervals.length; i++) {
    for (let j = i + 1; j < intervals.length; j++) {
      const a = intervals[i]!;
      const b = intervals[j]!;
      if (a.start < b.end && b.start < a.end) n++;
    }
  }
  return n;
}

/** Per-test bound, so one hang fails its test instead of the whole file. */
export const T = 120_000;

export const STEPS = ["after receive", "in the handler", "right before COMMIT"] as const;
export const restartTimes: Record<string, number> = {};
