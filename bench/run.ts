/**
 * `npm run bench`: keyq against its references on the same database in the
 * same run — pg-boss 12.38, raw Postgres (a one-document insert, a keyset
 * read) and the pg driver — each scenario in fresh schemas, for several
 * interleaved rounds; prints medians (min–max), the median of the per-round
 * ratios, and the target of issue 13 for each row.
 *
 *   npm run bench                      # full run, 5 rounds (see docs/benchmark.md for how long)
 *   npm run bench -- --quick           # smoke run: 1 round, small sizes
 *   npm run bench -- --rounds 3 --only exclusive-write,backlog
 *   npm run bench -- --json            # machine-readable results on stdout
 *   npm run bench -- --write-readme    # full run, then replace the table in docs/benchmark.md
 *
 * Progress goes to stderr, one line per scenario and round.
 *
 * @module
 */

import { readFileSync, writeFileSync } from "node:fs";
import os from "node:os";
import process from "node:process";
import { type Args, parseArgs, SCENARIOS, usage } from "./args.ts";
import { connect, DATABASE_URL, liveSchemas } from "./db.ts";
import * as kq from "./keyq-side.ts";
import { replaceBetweenMarkers, result, type RowResult, table } from "./rows.ts";
import { type Book, declare, runScenario } from "./scenarios.ts";
import { progress } from "./util.ts";

let parsed: ReturnType<typeof parseArgs>;
try {
  parsed = parseArgs(process.argv.slice(2));
} catch (err) {
  console.error((err as Error).message);
  process.exit(2);
}
if (parsed === "help") {
  console.log(usage());
  process.exit(0);
}
const args: Args = parsed;
const s = args.sizes;
const tierB = kq.hasTierB();
const admin = connect(`kqbench-admin-${process.pid}`);
const book: Book = { rows: new Map(), retried: new Map(), errors: [] };

function notes(): string[] {
  const out = [
    `Each round runs keyq and its reference one right after the other (alternating which goes first); ` +
    `"ratio" is the median over rounds of keyq / reference within a round; values are medians (min–max).`,
    `Drivers with their default settings: keyq on postgres.js (one connection per worker), pg-boss on node-postgres, ` +
    `raw references on postgres.js. Every consumer loops run() (pg-boss: fetch → handle → complete) on its own connection.`,
    `Tier A with a writing handler: ${fmt0(s.writeEvents)} events, keys drawn uniformly from ${fmt0(s.writeKeys)}` +
    ` (hot case: ${
      fmt0(s.hotEvents)
    } events, ${s.hotPercent} % of them on one extra key); keyq's handler inserts one row through tx in the batch transaction ` +
    `(engine defaults: deferDelay, maxEvents); pg-boss's worker inserts the same row on its connection, then completes ` +
    `(fetch batchSize ${s.maxEvents}). Deferrals = RunReport.deferred summed / events. No queue: the same inserts from ` +
    `${s.workers} connections, one statement each, 100 to a transaction (the handlers' writes alone).`,
    `Read limit: ${s.rawConns} connections read an equivalent table (keyq's event columns, one btree) by keyset, ` +
    `${s.batchSize} rows a statement, each a quarter of the id range. The three plain consumers read one backlog, each from the start.`,
    `Raw insert: insert … select … from jsonb_array_elements($1::text::jsonb), the ${s.batchSize} events as one JSON document.`,
    `No-queue floor (wake-ups): the same producer loop inserts each due group into a plain table in one statement that also ` +
    `pg_notify()s; a LISTENing connection hears it and a second connection reads the new rows by id (one statement, no ` +
    `transaction, no position kept). The "vs the no-queue floor" rows repeat keyq's woken latencies against it, same round.`,
    `Warm Tier B: the same ${fmt0(s.orderedEvents)} events and workers as the default-maxEvents row, measured after those ` +
    `connections read the same events as a second consumer (not measured), so no backend pays its cold first batches ` +
    `(functions compiled, statements planned); it runs after the round's other ordered rows, not alternated with them.`,
    `Round trips: a TCP proxy in front of Postgres counts client turns (the client starting to send after the server spoke); ` +
    `${s.rtStatements} statements (select $1::int) through each adapter's query, then ${s.rtStatements} q.send calls, then plain run() calls (maxEvents 10) until those events are handled.`,
    `Statements per batch: RunReport.statements / batches (keyq; no-op handlers, so none of their own); pg-boss: queries sent / non-empty fetches. ` +
    `Rows read per event: Δ(seq_tup_read + idx_tup_fetch) of the log tables (keyq event_*, pg-boss job*) / events.`,
    `pg-boss peers: plain = "standard" queue; Tier A = "singleton" policy with singletonKey = key (at most one active job per key); ` +
    `Tier B = "key_strict_fifo". supervise, schedule and instance registration off; ANALYZE after loading (both systems).`,
    `Sizes: ${Object.entries(s).map(([k, v]) => `${k}=${v}`).join(", ")}. Payloads ~200-byte JSON, the same seeded stream on every side.`,
  ];
  for (const [where, n] of book.retried) {
    out.push(`${where} (pg-boss): ${n} statement error(s) over all rounds (deadlocks between concurrent fetch/complete), each sent again by the loop.`);
  }
  if (!tierB) out.push("Tier B not available in this build (q.ordered is not a function): its keyq side was skipped.");
  return out;
}

const fmt0 = (n: number) => n.toLocaleString("en-US");

function header(version: string, minutes: string): string[] {
  const cpus = os.cpus();
  return [
    `keyq bench · ${new Date().toISOString().slice(0, 10)} · PostgreSQL ${version} · ${cpus.length} cores (${
      cpus[0]?.model.trim() ?? "?"
    }) · Node ${process.version}`,
    `${args.rounds} round(s)${args.quick ? ", quick sizes" : ""}, ${minutes} min; rows marked (↓): lower is better`,
  ];
}

function writeReadme(text: string): void {
  const path = new URL("../docs/benchmark.md", import.meta.url);
  const before = readFileSync(path, "utf8");
  writeFileSync(path, replaceBetweenMarkers(before, `\`\`\`text\n${text}\n\`\`\``));
  progress("docs/benchmark.md: benchmark table replaced");
}

async function main(): Promise<void> {
  const ids = SCENARIOS.filter((id) => args.only === null || args.only.includes(id));
  declare(book, ids, s);
  const version = String((await admin.unsafe("show server_version"))[0]!.server_version);
  const started = Date.now();
  const url = new URL(DATABASE_URL);
  url.password = url.password ? "***" : "";
  progress(
    `keyq bench on PostgreSQL ${version} (${url.href}), ${os.cpus().length} cores, Node ${process.version}; ${args.rounds} round(s)${
      args.quick ? ", quick sizes" : ""
    }`,
  );
  for (let round = 1; round <= args.rounds; round++) {
    for (const [i, id] of ids.entries()) {
      const t0 = Date.now();
      progress(`[round ${round}/${args.rounds}] ${id} …`);
      const line = await runScenario(book, id, admin, s, 1000 * round + i, round % 2 === 1);
      progress(`[round ${round}/${args.rounds}] ${id}: ${line} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    }
  }
  const rows: RowResult[] = [...book.rows.values()].map(result);
  const minutes = ((Date.now() - started) / 60_000).toFixed(1);
  if (args.json) {
    console.log(JSON.stringify(
      {
        date: new Date().toISOString(),
        command: `npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(" ")}` : ""}`,
        machine: { cores: os.cpus().length, cpu: os.cpus()[0]?.model ?? "unknown", node: process.version, postgres: version },
        rounds: args.rounds,
        sizes: s,
        results: rows,
        notes: notes(),
        errors: book.errors,
        minutes: Number(minutes),
      },
      null,
      2,
    ));
  }
  const text = [...header(version, minutes), "", table(rows), "", ...notes().map((n) => `- ${n}`)].join("\n");
  if (!args.json) {
    console.log(text);
    if (book.errors.length) console.log(`\n${book.errors.length} measurement(s) failed; see stderr.`);
  }
  if (args.writeReadme) {
    if (book.errors.length) progress("docs/benchmark.md left alone: some measurements failed");
    else writeReadme(text);
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
if (book.errors.length) process.exitCode = 1;
