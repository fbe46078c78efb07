/**
 * The keyq command line (bin/keyq.ts runs it): operations on a keyq schema through postgres.js or
 * pg (whichever is installed). Tables for people, `--json` for machines.
 * DATABASE_URL picks the database, `--schema` (or KEYQ_SCHEMA) the engine's
 * schema. Exit codes: 0 ok, 1 an error or a crossed `status --check`
 * threshold, 2 a bad command line.
 *
 *   keyq migrate | sql | status [queue] [--check] | queues | create-queue <name>
 *   keyq send <queue> <type> <json> [--key K] [--dedup-key D] [--ttl 1h]
 *   keyq tick <queue> [--force] | maintain [queue] [--force-rotate]
 *   keyq dlq list|count [--queue Q] [--consumer C] [--key K] | dlq replay <id…>
 *   keyq dlq replay-key <queue> <consumer> <key> | dlq purge --older-than 7d
 *   keyq grant|revoke <role> [--produce q,…] [--consume q:c,…] [--operate] [--all] | grants
 *   keyq sql grant|revoke <role> … (the same as SQL, for DBAs)
 *
 * @module
 */
import { type Driver, type Keyq, keyq, KeyqError, type RevokeInput, type RoleGrants } from "../mod.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { durationMs } from "../src/validate.ts";
import { type Args, type FlagSpec, parseArgs, renderTable, UsageError } from "./format.ts";
import { checkStatus, cursorRows, DEFAULT_THRESHOLDS, maintainRows, queueRows, queueSettings, type Thresholds } from "./status.ts";
import { VERSION } from "./version.ts";

const USAGE = `usage: keyq <command> [args] [--schema S] [--json]
  migrate                       apply pending engine migrations
  sql                           print the engine as one SQL script (for DBAs)
  sql grant|revoke <role> …     print a grant or revoke (below) as SQL, for the schema owner to run
  status [queue]                backlog, tick age, lag per consumer and slot
    --check                     exit 1 when a threshold is crossed (for cron and CI):
    --max-tick-age <dur>          last tick older than this (default 5m)
    --max-lag <n>                 a cursor more than n events behind (default: not checked)
    --max-lag-age <dur>           a cursor further behind than this (default: not checked)
    --max-dead <n>                more than n dead letters per consumer (default 0)
    --max-blocked <n>             more than n blocked keys per consumer (default 0)
                                  stale cursors always count
  queues                        queues and their settings
  create-queue <name>           create a queue (idempotent)
  send <queue> <type> <json>    append one event [--key K] [--dedup-key D] [--ttl 1h]
  tick <queue> [--force]        advance the ticker
  maintain [queue]              rotation and housekeeping [--force-rotate]
  dlq list|count                dead letters [--queue Q] [--consumer C] [--key K] [--limit N]
  dlq replay <id…>              replay dead letters to their consumer
  dlq replay-key <queue> <consumer> <key>   replay one key in original order
  dlq purge --older-than <dur>  delete old dead letters [--queue Q] [--consumer C] [--key K]
  grant <role>                  let a Postgres role use the engine (docs/roles.md; the schema owner only):
    --produce q1,q2               send to these queues ("*": every queue)
    --consume q:c1,q:c2           run these consumers, read their status and dead letters
    --operate                     create/drop queues, subscribe, force ticks and rotation, replay, purge
  revoke <role>                 take grants back: the same flags, or --all
  grants                        every role's grants
  help, --help, -h              this text;  --version  the version
Durations: "500ms", "30s", "5m", "2h", "7d". Driver: postgres (postgres.js), else pg.
Environment: DATABASE_URL (required except for sql and help), KEYQ_SCHEMA.`;

/** The flags every command accepts, and each command's own. */
const COMMON = ["schema", "json", "help", "version"];
const FLAGS: Record<string, { boolean: string[]; value: string[] }> = {
  migrate: { boolean: [], value: [] },
  sql: { boolean: ["operate", "all"], value: ["produce", "consume"] },
  grant: { boolean: ["operate"], value: ["produce", "consume"] },
  revoke: { boolean: ["operate", "all"], value: ["produce", "consume"] },
  grants: { boolean: [], value: [] },
  status: { boolean: ["check"], value: ["max-tick-age", "max-lag", "max-lag-age", "max-dead", "max-blocked"] },
  queues: { boolean: [], value: [] },
  "create-queue": { boolean: [], value: [] },
  send: { boolean: [], value: ["key", "dedup-key", "ttl"] },
  tick: { boolean: ["force"], value: [] },
  maintain: { boolean: ["force-rotate"], value: [] },
  dlq: { boolean: [], value: ["queue", "consumer", "key", "limit", "older-than"] },
  help: { boolean: [], value: [] },
};

/** Parses argv strictly: every flag must exist, and apply to the command given. */
export function parseCommandLine(argv: readonly string[]): Args {
  const all = Object.values(FLAGS);
  const spec: FlagSpec = {
    boolean: [...new Set(["json", "help", "version", ...all.flatMap((f) => f.boolean)])],
    value: [...new Set(["schema", ...all.flatMap((f) => f.value)])],
    short: { h: "help" },
  };
  const parsed = parseArgs(argv, spec);
  const command = parsed.positional[0];
  if (command === undefined) return parsed;
  const own = FLAGS[command];
  if (!own) throw new UsageError(`Unknown command "${command}"; see "keyq --help".`);
  for (const name of Object.keys(parsed.flags)) {
    if (!COMMON.includes(name) && !own.boolean.includes(name) && !own.value.includes(name)) {
      throw new UsageError(`Flag --${name} does not apply to "keyq ${command}"; see "keyq --help".`);
    }
  }
  return parsed;
}

/** Opens the database with whichever supported driver is installed: postgres, else pg. */
export async function connect(
  url: string,
  load: (specifier: string) => Promise<unknown> = (s) => import(s),
): Promise<{ driver: Driver; close: () => Promise<void> }> {
  try {
    const { default: postgres } = (await load("postgres")) as { default: typeof import("postgres") };
    const sql = postgres(url, { max: 2, onnotice: () => {} });
    return { driver: fromPostgresJs(sql), close: () => sql.end({ timeout: 5 }) };
  } catch (err) {
    if (!isMissing(err)) throw err;
  }
  try {
    const { default: pg } = (await load("pg")) as { default: typeof import("pg") };
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    return { driver: fromPg(pool), close: () => pool.end() };
  } catch (err) {
    if (!isMissing(err)) throw err;
  }
  throw new KeyqError("INVALID_INPUT", 'No Postgres driver found: install one next to keyq ("npm install postgres" or "npm install pg").');
}

function isMissing(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  return e?.code === "ERR_MODULE_NOT_FOUND" || e?.code === "MODULE_NOT_FOUND" || /Cannot find (module|package)/i.test(String(e?.message));
}

function number(flags: Args["flags"], name: string): number | undefined {
  const v = flags[name];
  if (v === undefined) return undefined;
  const n = Number(v);
  if (typeof v !== "string" || !/^\d+$/.test(v) || !Number.isSafeInteger(n)) throw new UsageError(`Flag --${name} needs a whole number (got "${String(v)}").`);
  return n;
}

function seconds(flags: Args["flags"], name: string): number | undefined {
  const v = flags[name];
  if (v === undefined) return undefined;
  try {
    return durationMs(name, String(v))! / 1000;
  } catch {
    throw new UsageError(`Flag --${name} needs a duration like "30s", "5m", "1h" (got "${String(v)}").`);
  }
}

/** The thresholds of `status --check` from its flags (any threshold flag implies --check). */
export function thresholds(flags: Args["flags"]): Thresholds | null {
  const given: Thresholds = {
    maxTickAge: seconds(flags, "max-tick-age"),
    maxLag: number(flags, "max-lag"),
    maxLagAge: seconds(flags, "max-lag-age"),
    maxDead: number(flags, "max-dead"),
    maxBlocked: number(flags, "max-blocked"),
  };
  const any = Object.values(given).some((v) => v !== undefined);
  if (!flags.check && !any) return null;
  const out: Thresholds = { ...DEFAULT_THRESHOLDS };
  for (const [k, v] of Object.entries(given)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}

/** Runs one command line; resolves to the exit code. */
export async function main(argv: readonly string[], env: Record<string, string | undefined>): Promise<number> {
  const { positional, flags } = parseCommandLine(argv);
  const [command, ...args] = positional;
  if (flags.version) return console.log(VERSION), 0;
  if (!command || command === "help" || flags.help) {
    if (!command && !flags.help) return console.error(USAGE), 2;
    console.log(USAGE);
    return 0;
  }
  const schema = String(flags.schema ?? env.KEYQ_SCHEMA ?? "keyq");
  const json = flags.json === true;
  const out = (rows: unknown, columns?: string[]) => console.log(json ? JSON.stringify(rows, null, 2) : renderTable(rows, columns));
  if (command === "sql") {
    const { migrationSql, grantSql } = await import("../mod.ts");
    if (args[0] === "grant" || args[0] === "revoke") {
      const g = grantFlags(need(args[1], "a role name"), flags, args[0]);
      console.log(grantSql(schema, args[0] === "revoke" ? { ...g, revoke: true } : g));
    } else if (args.length > 0) throw new UsageError(`keyq sql takes nothing, or grant|revoke <role> …; not "${args[0]}".`);
    else console.log(migrationSql(schema));
    return 0;
  }
  const check = command === "status" ? thresholds(flags) : null;
  const url = env.DATABASE_URL;
  if (!url) throw new UsageError("Set DATABASE_URL to the database to work on (postgres://user@host:5432/db).");
  const { driver, close } = await connect(url);
  const q = keyq(driver, { schema });
  try {
    switch (command) {
      case "migrate": {
        console.error(`migrating schema "${schema}"…`);
        out(await q.migrate());
        return 0;
      }
      case "status": {
        const status = await q.status(args[0] ? { queue: args[0] } : {});
        const problems = check ? checkStatus(status, check) : [];
        if (json) out(check ? { status, problems } : status);
        else {
          out(queueRows(status));
          console.log();
          out(cursorRows(status));
          if (check) console.log(problems.length ? `\nCHECK FAILED:\n${problems.map((p) => `  ${p}`).join("\n")}` : "\ncheck: ok");
        }
        return problems.length ? 1 : 0;
      }
      case "queues":
        out(json ? await q.listQueues() : (await q.listQueues()).map(queueSettings));
        return 0;
      case "create-queue": {
        const created = await q.createQueue(need(args[0], "a queue name"));
        out(json ? created.queue : queueSettings(created.queue));
        return 0;
      }
      case "send": {
        const text = need(args[2], "a JSON payload");
        let payload: unknown;
        try {
          payload = JSON.parse(text);
        } catch {
          throw new UsageError(`The payload is not JSON: ${text}`);
        }
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
      case "grant":
        out(grantRows([await q.grant(grantFlags(need(args[0], "a role name"), flags, "grant"))], json));
        return 0;
      case "revoke":
        out(grantRows([await q.revoke(grantFlags(need(args[0], "a role name"), flags, "revoke"))], json));
        return 0;
      case "grants":
        out(grantRows(await q.grants(), json), ["role", "produce", "consume", "operate"]);
        return 0;
      case "maintain": {
        const reports = await q.maintain(args[0], { forceRotate: flags["force-rotate"] === true });
        out(json ? reports : maintainRows(reports));
        return 0;
      }
      default:
        return await dlq(q, args, flags, out);
    }
  } finally {
    await close();
  }
}

/** A grant or revoke from the command line: `--produce a,b`, `--consume q:c,q:d`, `--operate`, `--all`. */
export function grantFlags(role: string, flags: Args["flags"], what: "grant" | "revoke"): RevokeInput {
  const list = (name: string): string[] => {
    const v = flags[name];
    if (v === undefined) return [];
    if (typeof v !== "string" || v.trim() === "") throw new UsageError(`Flag --${name} needs a comma-separated list.`);
    return v.split(",").map((x) => x.trim());
  };
  const consume: Record<string, string[]> = {};
  for (const pair of list("consume")) {
    const at = pair.indexOf(":");
    if (at <= 0 || at === pair.length - 1) throw new UsageError(`--consume takes queue:consumer pairs (e.g. orders:billing), not "${pair}".`);
    (consume[pair.slice(0, at)] ??= []).push(pair.slice(at + 1));
  }
  const g: RevokeInput = { role, produce: list("produce"), consume, operate: flags.operate === true };
  if (what === "revoke" && flags.all === true) g.all = true;
  return g;
}

/** Grants as table rows (or as they are, for --json). */
function grantRows(rows: RoleGrants[], json: boolean): unknown[] {
  if (json) return rows;
  return rows.map((g) => ({
    role: g.role,
    produce: g.produce.join(", "),
    consume: Object.entries(g.consume).map(([queue, cs]) => `${queue}: ${cs.join(", ")}`).join("; "),
    operate: g.operate ? "yes" : "",
  }));
}

function need(value: string | undefined, what: string): string {
  if (value === undefined) throw new UsageError(`Missing ${what}; see "keyq --help".`);
  return value;
}

async function dlq(q: Keyq, args: string[], flags: Args["flags"], out: (rows: unknown, columns?: string[]) => void): Promise<number> {
  const filter: Record<string, string> = {};
  for (const f of ["queue", "consumer", "key"] as const) if (typeof flags[f] === "string") filter[f] = flags[f] as string;
  switch (args[0]) {
    case "list": {
      const rows = await q.dlq.list({ ...filter, limit: number(flags, "limit") ?? 100 });
      out(rows.map((d) => ({ ...d, error: d.error?.message ?? "" })), ["id", "queue", "consumer", "slot", "eventId", "type", "key", "attempts", "error", "deadAt"]);
      return 0;
    }
    case "count":
      out({ deadLetters: await q.dlq.count(filter) });
      return 0;
    case "replay":
      if (args.length < 2) throw new UsageError('Missing dead letter ids: keyq dlq replay <id…>; "keyq dlq list" shows them.');
      out({ replayed: await q.dlq.replay(args.slice(1)) });
      return 0;
    case "replay-key":
      out({ replayed: await q.dlq.replayKey(need(args[1], "a queue"), need(args[2], "a consumer"), need(args[3], "a key")) });
      return 0;
    case "purge":
      out({ purged: await q.dlq.purge({ ...filter, olderThan: need(flags["older-than"] as string | undefined, "--older-than <duration>") }) });
      return 0;
    default:
      throw new UsageError('keyq dlq needs one of list, count, replay, replay-key, purge; see "keyq --help".');
  }
}

/** Prints an error the way the CLI reports it; resolves to the exit code (2 for a bad command line). */
export function report(err: unknown): number {
  if (err instanceof UsageError) {
    console.error(`keyq: ${err.message}`);
    return 2;
  }
  const e = err as Error & { code?: string };
  console.error(`keyq: ${e instanceof KeyqError ? `${e.code}: ${cliMessage(e)}` : e?.message ?? String(err)}`);
  return 1;
}

/** The library's advice names JavaScript calls; on the command line, name the command. */
export function cliMessage(err: KeyqError): string {
  const m = err.message;
  switch (err.code) {
    case "NOT_MIGRATED":
      return m.replace(/call migrate\(\) first\.?/, 'run "keyq migrate" first.');
    case "QUEUE_NOT_FOUND":
      return m.replace(/create it with createQueue\("([^"]*)"\) first\.?|`?createQueue`? first\.?/, (_all, name) => `create it with "keyq create-queue ${name ?? "<name>"}" first.`);
    case "PERMISSION_DENIED":
      return m.replace(/grant\(\{ role: "([^"]*)", produce: \["([^"]*)"\] \}\)/, 'keyq grant $1 --produce $2')
        .replace(/grant\(\{ role: "([^"]*)", consume: \{ ([^:]*): \["([^"]*)"\] \} \}\)/, "keyq grant $1 --consume $2:$3")
        .replace(/grant\(\{ role: "([^"]*)", operate: true \}\)/, "keyq grant $1 --operate")
        .replace("grant({ role, produce, consume, operate })", '"keyq grant <role> --produce … | --consume … | --operate"');
    case "CONSUMER_NOT_FOUND":
      return m.replace(/call subscribe\(\) first\.?/, "subscribe it from your code first (consumer(...).subscribe()).");
    default:
      return m;
  }
}
