#!/usr/bin/env node
/**
 * The keyq command line: operations on a keyq schema through postgres.js.
 * Tables for people, `--json` for machines. DATABASE_URL picks the database,
 * `--schema` (or KEYQ_SCHEMA) the engine's schema.
 *
 *   keyq migrate | sql | status [queue] | queues | create-queue <name>
 *   keyq send <queue> <type> <json> [--key K] [--dedup-key D] [--ttl 1h]
 *   keyq tick <queue> [--force] | maintain [queue] [--force-rotate]
 *   keyq dlq list|count [--queue Q] [--consumer C] [--key K] | dlq replay <id…>
 *   keyq dlq replay-key <queue> <consumer> <key> | dlq purge --older-than 7d
 *
 * @module
 */
import { keyq, KeyqError } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { parseArgs, renderTable } from "./format.ts";

const USAGE = `usage: keyq <command> [args] [--schema S] [--json]
  migrate                       apply pending engine migrations
  sql                           print the engine as one SQL script (for DBAs)
  status [queue]                backlog, tick age, lag per consumer and slot
  queues                        queues and their settings
  create-queue <name>           create a queue (idempotent)
  send <queue> <type> <json>    append one event [--key K] [--dedup-key D] [--ttl 1h]
  tick <queue> [--force]        advance the ticker
  maintain [queue]              rotation and housekeeping [--force-rotate]
  dlq list|count                dead letters [--queue Q] [--consumer C] [--key K] [--limit N]
  dlq replay <id…>              replay dead letters to their consumer
  dlq replay-key <queue> <consumer> <key>   replay one key in original order
  dlq purge --older-than <dur>  delete old dead letters
Environment: DATABASE_URL (required except for sql), KEYQ_SCHEMA.`;

type Proc = { argv: string[]; env: Record<string, string | undefined>; exitCode?: number };
const proc = (globalThis as unknown as { process: Proc }).process;

async function main(): Promise<number> {
  const { positional, flags } = parseArgs(proc.argv.slice(2));
  const [command, ...args] = positional;
  const schema = String(flags.schema ?? proc.env.KEYQ_SCHEMA ?? "keyq");
  const json = flags.json === true;
  const out = (rows: unknown, columns?: string[]) =>
    console.log(json ? JSON.stringify(rows, null, 2) : renderTable(rows, columns));
  if (!command || command === "help" || flags.help) {
    console.log(USAGE);
    return command ? 0 : 1;
  }
  if (command === "sql") {
    const { migrationSql } = await import("../mod.ts");
    console.log(migrationSql(schema));
    return 0;
  }
  const url = proc.env.DATABASE_URL;
  if (!url) {
    console.error("keyq: set DATABASE_URL to the database to work on (postgres://user@host:5432/db).");
    return 2;
  }
  const { default: postgres } = await import("postgres");
  const sql = postgres(url, { max: 2, onnotice: () => {} });
  const q = keyq(fromPostgresJs(sql), { schema });
  try {
    switch (command) {
      case "migrate": {
        console.error(`migrating schema "${schema}"…`);
        out(await q.migrate());
        return 0;
      }
      case "status": {
        const status = await q.status(args[0] ? { queue: args[0] } : {});
        if (json) return out(status), 0;
        out(status.map((s) => ({
          queue: s.queue,
          "last tick": s.lastTick,
          "tick age s": s.lastTickAge?.toFixed(1),
          "not ticked": s.eventsSinceTick,
          table: `${s.currentTable}/${s.tables}`,
          consumers: s.consumers.length,
        })));
        out(status.flatMap((s) =>
          s.consumers.flatMap((c) =>
            c.cursors.map((cu) => ({
              queue: s.queue,
              consumer: c.name,
              kind: c.kind,
              slot: c.kind === "ordered" ? cu.slot : "",
              "lag events": cu.lagEvents,
              "lag s": cu.lagSeconds.toFixed(1),
              "polled s ago": cu.polledAgo.toFixed(1),
              stale: cu.stale ? "STALE" : "",
              retries: c.retries,
              dlq: c.deadLetters,
              blocked: c.blockedKeys,
            }))
          )
        ));
        return 0;
      }
      case "queues":
        out(await q.listQueues(), ["name", "tables", "currentTable", "maxRetries", "retryBase", "retryCap", "rotationPeriod"]);
        return 0;
      case "create-queue":
        out((await q.createQueue(need(args[0], "a queue name"))).queue);
        return 0;
      case "send": {
        const payload = JSON.parse(need(args[2], "a JSON payload"));
        const event: Record<string, unknown> = { type: need(args[1], "an event type"), payload };
        if (flags.key !== undefined) event.key = String(flags.key);
        if (flags["dedup-key"] !== undefined) event.dedupKey = String(flags["dedup-key"]);
        if (flags.ttl !== undefined) event.ttl = String(flags.ttl);
        out(await q.send(need(args[0], "a queue name"), event as never));
        return 0;
      }
      case "tick":
        out({ tick: await q.tick(need(args[0], "a queue name"), { force: flags.force === true }) });
        return 0;
      case "maintain":
        out(await q.maintain(args[0], { forceRotate: flags["force-rotate"] === true }));
        return 0;
      case "dlq":
        return await dlq(q, args, flags, out);
      default:
        console.error(`keyq: unknown command "${command}".\n${USAGE}`);
        return 2;
    }
  } finally {
    await sql.end({ timeout: 5 });
  }
}

function need(value: string | undefined, what: string): string {
  if (value === undefined) throw new KeyqError("INVALID_INPUT", `Missing ${what}; see "keyq help".`);
  return value;
}

async function dlq(
  q: ReturnType<typeof keyq>,
  args: string[],
  flags: Record<string, string | true>,
  out: (rows: unknown, columns?: string[]) => void,
): Promise<number> {
  const filter: Record<string, string> = {};
  for (const f of ["queue", "consumer", "key"] as const) if (typeof flags[f] === "string") filter[f] = flags[f] as string;
  switch (args[0]) {
    case "list": {
      const limit = flags.limit === undefined ? 100 : Number(flags.limit);
      const rows = await q.dlq.list({ ...filter, limit });
      out(rows.map((d) => ({ ...d, error: d.error?.message ?? "" })), ["id", "queue", "consumer", "slot", "eventId", "type", "key", "attempts", "error", "deadAt"]);
      return 0;
    }
    case "count":
      out({ deadLetters: await q.dlq.count(filter) });
      return 0;
    case "replay":
      out({ replayed: await q.dlq.replay(args.slice(1)) });
      return 0;
    case "replay-key":
      out({ replayed: await q.dlq.replayKey(need(args[1], "a queue"), need(args[2], "a consumer"), need(args[3], "a key")) });
      return 0;
    case "purge":
      out({ purged: await q.dlq.purge({ ...filter, olderThan: String(need(flags["older-than"] as string | undefined, "--older-than")) }) });
      return 0;
    default:
      console.error('keyq: dlq needs one of list, count, replay, replay-key, purge; see "keyq help".');
      return 2;
  }
}

main().then(
  (code) => (proc.exitCode = code),
  (err) => {
    const e = err as Error & { code?: string };
    console.error(`keyq: ${e instanceof KeyqError ? `${e.code}: ` : ""}${e.message}`);
    proc.exitCode = 1;
  },
);
