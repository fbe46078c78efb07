/**
 * The keyq command line (bin/keyq.ts runs it): operations on a keyq schema through postgres.js or
 * pg (whichever is installed). Tables for people, `--json` for machines.
 * DATABASE_URL picks the database, `--schema` (or KEYQ_SCHEMA) the engine's
 * schema. Exit codes: 0 ok, 1 an error or a crossed `status --check`
 * threshold, 2 a bad command line (a bad argument value included).
 *
 *   keyq migrate | sql | status [queue] [--check] | queues
 *   keyq create-queue|update-queue <name> [--retention 7d …] | drop-queue <name> --yes
 *   keyq unsubscribe|pause|resume|blocked <queue> <consumer> | seek <queue> <consumer> <to> --yes
 *   keyq skip-head|dead-letter-head <queue> <consumer> <key> | history <queue> <key> | replay-key
 *   keyq send <queue> <type> <json> [--key K] [--dedup-key D] [--ttl 1h]
 *   keyq tick <queue> [--force] | maintain [queue] [--force-rotate]
 *   keyq dlq list|count [--queue Q] [--consumer C] [--key K] | dlq replay <id…>
 *   keyq dlq replay-key <queue> <consumer> <key> | dlq purge --older-than 7d
 *   keyq grant|revoke <role> [--produce q,…] [--consume q:c,…] [--operate] [--all] | grants
 *   keyq sql grant|revoke <role> … (the same as SQL, for DBAs)
 *
 * @module
 */
import { type Keyq, keyq, KeyqError, type RevokeInput, type RoleGrants, type TxDriver } from "../mod.ts";
import { logCommand, settingFlags } from "./log.ts";
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
  create-queue <name>           create a queue (idempotent) with settings:
    --tables N --max-retries N --retry-base <dur> --retry-cap <dur> --rotation-period <dur>
    --tick-max-count N --tick-max-lag <dur> --tick-idle-period <dur> --retention <dur>
  update-queue <name>           change settings (the same flags but --tables; --retention 0 turns it off)
  drop-queue <name> --yes       delete a queue with its events, consumers and dead letters
  unsubscribe <queue> <consumer> --yes   remove a consumer with its cursor, retries and dead letters
  seek <queue> <consumer> <to> --yes     move a consumer to latest, earliest, an event id or an
                                ISO date [--slot N: one slot of an ordered consumer]; drops its retries
  pause|resume <queue> <consumer>        stop / restart a consumer's batches by hand
  blocked <queue> <consumer>    keys blocked behind a failed head (pause policy)
  skip-head <queue> <consumer> <key> --yes   drop a blocked key's failed head; the key flows again
  dead-letter-head <queue> <consumer> <key>  dead-letter a blocked key's head now
  history <queue> <key>         one key's retained events in order [--from <to>] [--after P] [--limit N]
  replay-key <queue> <key> --into <consumer>  deliver one key's history again to one consumer [--from <to>]
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
Durations: "500ms", "30s", "5m", "2h", "7d", or a number of milliseconds (the unit --json reports). Driver: postgres (postgres.js), else pg.
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
  "create-queue": { boolean: [], value: settingFlags(true) },
  "update-queue": { boolean: [], value: settingFlags(false) },
  "drop-queue": { boolean: ["yes"], value: [] },
  unsubscribe: { boolean: ["yes"], value: [] },
  seek: { boolean: ["yes"], value: ["slot"] },
  pause: { boolean: [], value: [] },
  resume: { boolean: [], value: [] },
  blocked: { boolean: [], value: [] },
  "skip-head": { boolean: ["yes"], value: [] },
  "dead-letter-head": { boolean: [], value: [] },
  history: { boolean: [], value: ["from", "after", "limit"] },
  "replay-key": { boolean: [], value: ["into", "from"] },
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
): Promise<{ driver: TxDriver; close: () => Promise<void> }> {
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
  throw new KeyqError("DRIVER_NOT_FOUND", 'No Postgres driver found: install one next to keyq ("npm install postgres" or "npm install pg").');
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

/** A duration flag in milliseconds: a bare number is milliseconds (what `status --json` reports), or text like "5m". */
function ms(flags: Args["flags"], name: string): number | undefined {
  const v = flags[name];
  if (v === undefined) return undefined;
  try {
    return durationMs(name, String(v));
  } catch {
    throw new UsageError(`Flag --${name} needs a duration: milliseconds, or text like "30s", "5m", "1h" (got "${String(v)}").`);
  }
}

/** The thresholds of `status --check` from its flags (any threshold flag implies --check). */
export function thresholds(flags: Args["flags"]): Thresholds | null {
  const given: Thresholds = {
    maxTickAgeMs: ms(flags, "max-tick-age"),
    maxLag: number(flags, "max-lag"),
    maxLagMs: ms(flags, "max-lag-age"),
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
  const json = flags.json === true;
  if (flags.version) return console.log(json ? JSON.stringify({ version: VERSION }) : VERSION), 0;
  if (!command || command === "help" || flags.help) {
    if (!command && !flags.help) return console.error(USAGE), 2;
    console.log(json ? JSON.stringify({ usage: USAGE }) : USAGE);
    return 0;
  }
  const schema = String(flags.schema ?? env.KEYQ_SCHEMA ?? "keyq");
  const out = (rows: unknown, columns?: string[]) => console.log(json ? JSON.stringify(rows, null, 2) : renderTable(rows, columns));
  if (command === "sql") {
    const { migrationSql, grantSql } = await import("../mod.ts");
    let text: string;
    if (args[0] === "grant" || args[0] === "revoke") {
      const g = grantFlags(need(args[1], "a role name"), flags, args[0]);
      text = grantSql(schema, args[0] === "revoke" ? { ...g, revoke: true } : g);
    } else if (args.length > 0) throw new UsageError(`keyq sql takes nothing, or grant|revoke <role> …; not "${args[0]}".`);
    else text = migrationSql(schema);
    console.log(json ? JSON.stringify({ schema, sql: text }) : text);
    return 0;
  }
  const check = command === "status" ? thresholds(flags) : null;
  const url = env.DATABASE_URL;
  if (!url) throw new UsageError("Set DATABASE_URL to the database to work on (postgres://user@host:5432/db).");
  checkUrl(url);
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
      case "dlq":
        return await dlq(q, args, flags, out);
      default:
        return (await logCommand(q, command, args, flags, json, out)) ?? 2;
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

/** A DATABASE_URL that is not a postgres:// URL is named as such (exit 2), before any driver sees it. */
export function checkUrl(url: string): void {
  let u: URL | undefined;
  try {
    u = new URL(url);
  } catch {
    u = undefined;
  }
  if (!u || (u.protocol !== "postgres:" && u.protocol !== "postgresql:")) {
    throw new UsageError(
      `DATABASE_URL is not a postgres:// URL (got "${url.replace(/:[^:@/]*@/, ":***@")}"); give one like postgres://user:password@host:5432/db.`,
    );
  }
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
      out(rows.map((d) => ({ ...d, error: d.error?.message ?? "" })), [
        "id",
        "queue",
        "consumer",
        "slot",
        "eventId",
        "type",
        "key",
        "attempts",
        "error",
        "deadAt",
      ]);
      return 0;
    }
    case "count":
      out({ deadLetters: await q.dlq.count(filter) });
      return 0;
    case "replay":
      if (args.length < 2) throw new UsageError('Missing dead letter ids: keyq dlq replay <id…>; "keyq dlq list" shows them.');
      for (const id of args.slice(1)) {
        if (!/^\d{1,19}$/.test(id)) throw new UsageError(`Dead letter ids are whole numbers such as 42, not "${id}"; "keyq dlq list" shows them.`);
      }
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
  // A value the library refused came from the command line: a usage error.
  return e instanceof KeyqError && (e.code === "INVALID_INPUT" || e.code === "INVALID_IDENTIFIER") ? 2 : 1;
}

/** JavaScript calls the library's advice names, and the CLI command doing the same. */
const CALLS: [RegExp, (m: string[]) => string][] = [
  [/call migrate\(\) first/, () => 'run "keyq migrate" first'],
  [/createQueue\("([^"]*)"\)/, (m) => `"keyq create-queue ${m[1]}"`],
  [/`?createQueue`?/, () => '"keyq create-queue <name>"'],
  [/updateQueue\("([^"]*)", \{ (\w+) \}\)/, (m) => `"keyq update-queue ${m[1]} --${m[2]!.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)} <value>"`],
  [/listQueues\(\)/, () => '"keyq queues"'],
  [/dlq\.list\(\)/, () => '"keyq dlq list"'],
  [/status\(\)/, () => '"keyq status"'],
  [/call subscribe\(\) first/, () => "subscribe it from your code first (consumer(...).subscribe())"],
  [/pass slots: (\d+)/, (m) => `use slots: ${m[1]} in your code`],
  [/grant\(\{ role: "([^"]*)", produce: \["([^"]*)"\] \}\)/, (m) => `keyq grant ${m[1]} --produce ${m[2]}`],
  [/grant\(\{ role: "([^"]*)", consume: \{ ([^:]*): \["([^"]*)"\] \} \}\)/, (m) => `keyq grant ${m[1]} --consume ${m[2]}:${m[3]}`],
  [/grant\(\{ role: "([^"]*)", operate: true \}\)/, (m) => `keyq grant ${m[1]} --operate`],
  [/grant\(\{ role, produce, consume, operate \}\)/, () => '"keyq grant <role> --produce … | --consume … | --operate"'],
];

/** The library's advice names JavaScript calls; on the command line, name the command. */
export function cliMessage(err: KeyqError): string {
  let m = err.message;
  for (const [re, to] of CALLS) m = m.replace(new RegExp(re.source, "g"), (...all) => to(all.slice(0, -2) as string[]));
  return m;
}
