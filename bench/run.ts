/**
 * `npm run bench`: keyq against pg-boss 12.38 on the same database in the
 * same run, each scenario in fresh schemas, repeated for several rounds;
 * prints medians (min–max) and the ratio keyq / pg-boss.
 *
 *   npm run bench                      # full run, 5 rounds
 *   npm run bench -- --quick           # ~30 s smoke run (1 round, small sizes)
 *   npm run bench -- --rounds 3 --only exclusive,latency
 *   npm run bench -- --json            # machine-readable results on stdout
 *   npm run bench -- --exclusive-events 50000 --workers 8
 *
 * Progress goes to stderr, one line per scenario and round.
 *
 * @module
 */

import os from "node:os";
import process from "node:process";
import { connect, DATABASE_URL, liveSchemas } from "./db.ts";
import * as kq from "./keyq-side.ts";
import * as boss from "./pgboss-side.ts";
import { type ConsumeResult, FULL, type LatencyResult, QUICK, type Sizes } from "./sizes.ts";
import { fmt, progress, summarize, type Summary } from "./util.ts";

interface Args {
  rounds: number;
  quick: boolean;
  json: boolean;
  only: string[] | null;
  sizes: Sizes;
}

const SCENARIOS = ["produce-send", "produce-batch", "produce-dedup", "plain", "exclusive", "latency", "retry", "ordered"] as const;
type ScenarioId = (typeof SCENARIOS)[number];

const kebab = (k: string) => k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

function usage(): string {
  return [
    "usage: npm run bench -- [--quick] [--rounds N] [--json] [--only a,b] [--<size> N ...]",
    `scenarios: ${SCENARIOS.join(", ")}`,
    `sizes (full defaults): ${Object.entries(FULL).map(([k, v]) => `--${kebab(k)} ${v}`).join(" ")}`,
  ].join("\n");
}

function parseArgs(argv: string[]): Args {
  const quick = argv.includes("--quick");
  const sizes: Sizes = { ...(quick ? QUICK : FULL) };
  const out: Args = { rounds: quick ? 1 : 5, quick, json: false, only: null, sizes };
  const sizeFlags = new Map(Object.keys(FULL).map((k) => [`--${kebab(k)}`, k as keyof Sizes]));
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value\n${usage()}`);
      return v;
    };
    const int = (v: string) => {
      const n = Number(v);
      if (!Number.isInteger(n) || n < 1) throw new Error(`${a} needs a positive integer, not "${v}"`);
      return n;
    };
    if (a === "--quick") continue;
    else if (a === "--json") out.json = true;
    else if (a === "--rounds") out.rounds = int(value());
    else if (a === "--only") {
      out.only = value().split(",").map((s) => s.trim());
      for (const s of out.only) if (!(SCENARIOS as readonly string[]).includes(s)) throw new Error(`unknown scenario "${s}"\n${usage()}`);
    } else if (sizeFlags.has(a)) sizes[sizeFlags.get(a)!] = int(value());
    else if (a === "--help" || a === "-h") {
      console.log(usage());
      process.exit(0);
    } else throw new Error(`unknown option "${a}"\n${usage()}`);
  }
  return out;
}

/** One row of the result table. */
interface Metric {
  id: string;
  label: string;
  unit: string;
  better: "higher" | "lower";
  keyq: number[];
  pgboss: number[];
}

const args = parseArgs(process.argv.slice(2));
const s = args.sizes;
const tierB = kq.hasTierB();
const admin = connect(`kqbench-admin-${process.pid}`);
const metrics = new Map<string, Metric>();
const errors: string[] = [];
/** Statement errors a consume loop met and retried, per scenario and side (pg-boss singleton deadlocks). */
const retriedErrors = new Map<string, number>();

function metric(id: string, label: string, unit: string, better: "higher" | "lower"): Metric {
  let m = metrics.get(id);
  if (!m) metrics.set(id, m = { id, label, unit, better, keyq: [], pgboss: [] });
  return m;
}

/** Declares the rows up front, so the table keeps this order. */
function declare(): void {
  const on = (id: ScenarioId) => args.only === null || args.only.includes(id);
  if (on("produce-send")) metric("produce-send", "produce: send, 1 connection", "events/s", "higher");
  if (on("produce-batch")) metric("produce-batch", `produce: sendBatch ×${s.batchSize} (pg-boss insert)`, "events/s", "higher");
  if (on("produce-dedup")) {
    metric("dedup-small", `produce: one sendBatch of ${s.dedupSmall} events with dedup keys (keyq only)`, "ms", "lower");
    metric("dedup-large", `produce: one sendBatch of ${s.dedupLarge} events with dedup keys (keyq only)`, "ms", "lower");
  }
  if (on("plain")) metric("plain", "consume: plain, 1 worker (pg-boss standard)", "events/s", "higher");
  if (on("exclusive")) metric("exclusive", `consume: Tier A, ${s.workers} workers (pg-boss singleton)`, "events/s", "higher");
  if (on("latency")) {
    metric("latency-p50", `Tier A latency p50 at ${s.rate}/s`, "ms", "lower");
    metric("latency-p95", `Tier A latency p95 at ${s.rate}/s`, "ms", "lower");
  }
  if (on("retry")) metric("retry", `retry: every event fails once, Tier A, ${s.workers} workers`, "retried events/s", "higher");
  if (on("ordered")) metric("ordered", `consume: Tier B, ${s.slots} slots, ${s.workers} workers (pg-boss key_strict_fifo)`, "events/s", "higher");
  if (on("plain")) metric("rt-plain", "round trips per batch: plain", "", "lower");
  if (on("exclusive")) metric("rt-exclusive", "round trips per batch: Tier A", "", "lower");
  if (on("ordered")) metric("rt-ordered", "round trips per batch: Tier B", "", "lower");
  if (on("plain")) metric("ra-plain", "read amplification: plain", "rows/event", "lower");
  if (on("exclusive")) metric("ra-exclusive", "read amplification: Tier A", "rows/event", "lower");
  if (on("ordered")) metric("ra-ordered", "read amplification: Tier B", "rows/event", "lower");
}

type Side = "keyq" | "pgboss";

/** Runs one side and records it; NaN (shown as an error) when it throws. */
async function measure<T>(side: Side, what: string, fn: () => Promise<T>): Promise<T | null> {
  try {
    return await fn();
  } catch (err) {
    const msg = `${what} (${side}) failed: ${(err as Error).stack ?? err}`;
    errors.push(msg);
    progress(`  ! ${msg}`);
    return null;
  }
}

function recordConsume(side: Side, id: string, r: ConsumeResult | null, extra: { rt?: string; ra?: string }) {
  if (r?.errors) retriedErrors.set(`${id} (${side})`, (retriedErrors.get(`${id} (${side})`) ?? 0) + Number(r.errors.split(" ")[0]));
  metric(id, "", "", "higher")[side].push(r?.eventsPerSec ?? Number.NaN);
  if (extra.rt) metrics.get(extra.rt)?.[side].push(r?.roundTripsPerBatch ?? Number.NaN);
  if (extra.ra) metrics.get(extra.ra)?.[side].push(r?.readAmp ?? Number.NaN);
}

const describeConsume = (r: ConsumeResult | null) =>
  r
    ? `${fmt(r.eventsPerSec)} ev/s, ${fmt(r.roundTripsPerBatch)} rt/batch, ${fmt(r.eventsPerBatch)} ev/batch, ` +
      `${fmt(r.readAmp)} rows/ev${r.errors ? ` [${r.errors}]` : ""}`
    : "error";

/** One scenario of one round, both sides, in `order`. */
async function scenario(id: ScenarioId, round: number, order: Side[]): Promise<void> {
  const seed = 1000 * round + SCENARIOS.indexOf(id);
  const started = Date.now();
  const parts: string[] = [];
  for (const side of order) {
    const name = side === "keyq" ? "keyq" : "pg-boss";
    const lib = side === "keyq" ? kq : boss;
    switch (id) {
      case "produce-send":
      case "produce-batch": {
        const fn = id === "produce-send" ? lib.produceSingle : lib.produceBatch;
        const r = await measure(side, id, () => fn(admin, s, seed));
        metrics.get(id)![side].push(r ?? Number.NaN);
        parts.push(`${name} ${r === null ? "error" : `${fmt(r)} ev/s`}`);
        break;
      }
      case "produce-dedup": {
        if (side !== "keyq") break; // pg-boss has no per-event dedup in one insert call
        for (const [row, n] of [["dedup-small", s.dedupSmall], ["dedup-large", s.dedupLarge]] as const) {
          const r = await measure(side, `${id} ${n}`, () => kq.produceDedup(admin, n, seed));
          metrics.get(row)!.keyq.push(r ?? Number.NaN);
          parts.push(`keyq ${n} events ${r === null ? "error" : `${fmt(r)} ms`}`);
        }
        break;
      }
      case "plain":
      case "exclusive":
      case "retry": {
        const fn = id === "plain" ? lib.consumePlain : id === "exclusive" ? lib.consumeExclusive : lib.retryExclusive;
        const r = await measure(side, id, () => fn(admin, s, seed));
        recordConsume(side, id, r, id === "retry" ? {} : { rt: `rt-${id}`, ra: `ra-${id}` });
        parts.push(`${name} ${describeConsume(r)}`);
        break;
      }
      case "ordered": {
        if (side === "keyq" && !tierB) {
          parts.push("keyq skipped (Tier B not available yet)");
          break;
        }
        const r = await measure(side, id, () => lib.consumeOrdered(admin, s, seed));
        recordConsume(side, id, r, { rt: "rt-ordered", ra: "ra-ordered" });
        parts.push(`${name} ${describeConsume(r)}`);
        break;
      }
      case "latency": {
        const r: LatencyResult | null = await measure(side, id, () => lib.latencyExclusive(admin, s, seed));
        metrics.get("latency-p50")![side].push(r?.p50 ?? Number.NaN);
        metrics.get("latency-p95")![side].push(r?.p95 ?? Number.NaN);
        parts.push(`${name} ${r ? `p50 ${fmt(r.p50)} ms, p95 ${fmt(r.p95)} ms (${r.count} events)` : "error"}`);
        break;
      }
    }
  }
  const secs = ((Date.now() - started) / 1000).toFixed(1);
  progress(`[round ${round}/${args.rounds}] ${id.padEnd(13)} ${parts.join(" · ")} (${secs} s)`);
}

function cell(x: Summary | null, unit: string): string {
  if (!x) return "—";
  const u = unit === "ms" ? " ms" : "";
  return x.rounds.length === 1 ? `${fmt(x.median)}${u}` : `${fmt(x.median)}${u} (${fmt(x.min)}–${fmt(x.max)})`;
}

function table(rows: { label: string; unit: string; better: string; k: Summary | null; b: Summary | null; ratio: number | null }[]): string {
  const head = ["scenario", "keyq median (min–max)", "pg-boss median (min–max)", "keyq / pg-boss"];
  const body = rows.map((r) => [
    `${r.label}${r.unit && r.unit !== "ms" ? `, ${r.unit}` : ""} (${r.better === "higher" ? "↑" : "↓"})`,
    r.k ? cell(r.k, r.unit) : r.label.includes("Tier B") && !tierB ? "skipped: Tier B not available yet" : "—",
    cell(r.b, r.unit),
    r.ratio === null ? "—" : `${r.ratio < 0.1 ? r.ratio.toPrecision(2) : r.ratio.toFixed(2)}×`,
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...body.map((b) => b[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(" | ")} |`;
  return [line(head), `|${widths.map((w) => "-".repeat(w + 2)).join("|")}|`, ...body.map(line)].join("\n");
}

async function main(): Promise<void> {
  declare();
  const version = String((await admin.unsafe("show server_version"))[0]!.server_version);
  const cpus = os.cpus();
  const started = Date.now();
  const url = new URL(DATABASE_URL);
  url.password = url.password ? "***" : "";
  progress(
    `keyq vs pg-boss 12.38 on PostgreSQL ${version} (${url.href}), ${cpus.length} cores, Node ${process.version}; ` +
      `${args.rounds} round(s)${args.quick ? ", quick sizes" : ""}`,
  );
  if (!tierB) progress("Tier B not available yet (q.ordered is not a function): the keyq side of the Tier B scenario is skipped.");
  const ids = SCENARIOS.filter((id) => args.only === null || args.only.includes(id));
  for (let round = 1; round <= args.rounds; round++) {
    // Alternate which system goes first, so drift on a noisy machine does not favour one side.
    const order: Side[] = round % 2 ? ["keyq", "pgboss"] : ["pgboss", "keyq"];
    for (const id of ids) await scenario(id, round, order);
  }
  const rows = [...metrics.values()].map((m) => {
    const k = summarize(m.keyq);
    const b = summarize(m.pgboss);
    return { id: m.id, label: m.label, unit: m.unit, better: m.better, k, b, ratio: k && b && b.median !== 0 ? k.median / b.median : null };
  });
  const minutes = ((Date.now() - started) / 60_000).toFixed(1);
  const notes = [
    `pg-boss peers: plain = 1 worker on a "standard" queue; Tier A = "singleton" policy with singletonKey = tenant ` +
    `(at most one active job per key, enforced by a unique partial index; the closest per-key exclusion pg-boss has); ` +
    `Tier B = "key_strict_fifo" (FIFO per singletonKey).`,
    `Every pg-boss worker is its own PgBoss instance (max: 1 connection) looping fetch({ batchSize: ${s.maxEvents} }) → complete/fail, ` +
    `the same loop keyq's run() does with maxEvents: ${s.maxEvents}; supervise, schedule and instance registration off; ANALYZE after loading (both systems).`,
    `Round trips per batch: keyq RunReport.roundTrips / batches (includes each run's tick, maintenance and final empty look); ` +
    `pg-boss: pg queries sent during the consume phase / non-empty fetches.`,
    `Read amplification: Δ(seq_tup_read + idx_tup_fetch) from pg_stat_user_tables around the consume phase / events; ` +
    `keyq: the schema's event_* tables; pg-boss: its job* tables.`,
    `Sizes: ${Object.entries(s).map(([k, v]) => `${k}=${v}`).join(", ")}. Payloads ~200-byte JSON, keys drawn at random from 200 tenants, the same seeded stream on both sides.`,
    `keyq uses postgres.js with TCP_NODELAY set on its socket (pg-boss's node-postgres sets it itself).`,
  ];
  for (const [where, n] of retriedErrors) {
    notes.push(`${where}: ${n} statement error(s) over all rounds (deadlocks between concurrent fetch/complete), each sent again by the loop.`);
  }
  if (!tierB) notes.push("Tier B not available yet (q.ordered is not a function): its keyq side was skipped.");
  if (args.json) {
    console.log(JSON.stringify(
      {
        date: new Date().toISOString(),
        command: `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(" ")}` : ""}`,
        machine: { cores: cpus.length, cpu: cpus[0]?.model ?? "unknown", node: process.version, postgres: version },
        rounds: args.rounds,
        sizes: s,
        tierB: tierB ? "measured" : "skipped: Tier B not available yet",
        results: rows,
        notes,
        errors,
        minutes: Number(minutes),
      },
      null,
      2,
    ));
  } else {
    console.log(`keyq vs pg-boss 12.38 · ${new Date().toISOString().slice(0, 10)} · PostgreSQL ${version} · ${cpus.length} cores (${cpus[0]?.model.trim() ?? "?"}) · Node ${process.version}`);
    console.log(`${args.rounds} round(s), medians with (min–max); ↑ higher is better, ↓ lower is better; ${minutes} min\n`);
    console.log(table(rows));
    console.log("");
    for (const n of notes) console.log(`- ${n}`);
    if (errors.length) console.log(`\n${errors.length} measurement(s) failed; see stderr.`);
  }
}

// Ctrl-C: drop the schemas of the measurement in flight, then exit.
for (const signal of ["SIGINT", "SIGTERM"] as const) {
  process.once(signal, async () => {
    progress(`${signal}: dropping ${liveSchemas.size} schema(s) of this run and exiting`);
    const cleanup = connect(`kqbench-cleanup-${process.pid}`);
    for (const schema of liveSchemas) await cleanup.unsafe(`drop schema if exists "${schema}" cascade`).catch(() => {});
    await cleanup.end({ timeout: 2 });
    process.exit(130);
  });
}

try {
  await main();
} finally {
  await admin.end({ timeout: 5 });
}
if (errors.length) process.exitCode = 1;
