/**
 * The one list of drivers the tests run: `driverSpecs` (the README matrix and
 * tests/conformance.test.ts; tests/faults*.test.ts and tests/drivers.test.ts
 * take their drivers from it too) and `poolerSpecs` (the same clients behind
 * PgBouncer). Each `DriverSpec` opens the user-facing client
 * of its driver (a pg Pool, a Neon Client through the local WebSocket proxy,
 * `Bun.SQL`…), wraps it with the adapter, and `fixtureOn` turns that into the
 * `Fixture` the case lists run over: a migrated client in a fresh schema,
 * plus `raw` (postgres.js on its own connection) for assertions.
 *
 * Neon's WebSocket drivers need `setupNeon()` first (starts the proxy and
 * points the process-global `neonConfig` at it); `teardownNeon()` restores
 * `neonConfig` exactly and stops the proxy.
 */
import pg from "pg";
import { Client as NeonClient, neon, neonConfig, Pool as NeonPool } from "@neondatabase/serverless";
import assert from "node:assert/strict";
import postgres from "postgres";
import { keyq, type KeyqOptions, latestVersion } from "../../mod.ts";
import type { TxDriver } from "../../src/driver.ts";
import { type BunSqlLike, fromBunSql } from "../../src/drivers/bun-sql.ts";
import { fromNeonClient, fromNeonHttp, fromNeonPool } from "../../src/drivers/neon.ts";
import { fromPg } from "../../src/drivers/pg.ts";
import { fromPGlite } from "../../src/drivers/pglite.ts";
import { fromPostgresJs } from "../../src/drivers/postgres-js.ts";
import type { Case } from "../suites/basic.ts";
import { connect, freshSchema, type Sql, startPGlite } from "./db.ts";
import { closePGlite, type Fixture, pgliteFixture } from "./keyq.ts";
import { configureNeon, type NeonProxy, startNeonProxy } from "./neon-proxy.ts";
import { configureNeonHttp, type NeonHttpShim, startNeonHttpShim } from "./neon-http-shim.ts";
import { type PgBouncer, startPgBouncer } from "./pgbouncer.ts";
import { scoped } from "./scope.ts";
import type { Runtime } from "../../scripts/lib/matrix.ts";

/** The JavaScript runtime running this file (the runtimes of the matrix, scripts/lib/matrix.ts). */
export type { Runtime };

/** `deno`, `bun` or `node`, from the runtime's own global. */
export function runtimeName(): Runtime {
  if ("Deno" in globalThis) return "deno";
  if ("Bun" in globalThis) return "bun";
  return "node";
}

/** The runtime's version string, e.g. `v20.20.2`, `deno 2.9.6`, `bun 1.4.5`. */
export function runtimeVersion(): string {
  const g = globalThis as { Deno?: { version: { deno: string } }; Bun?: { version: string }; process?: { version: string } };
  if (g.Deno) return `deno ${g.Deno.version.deno}`;
  if (g.Bun) return `bun ${g.Bun.version}`;
  return `node ${g.process?.version ?? "?"}`;
}

/** An opened driver and how to close its client. */
export interface Opened {
  driver: TxDriver;
  close(): Promise<void>;
}

/**
 * How a client is opened. Conformance uses the defaults; the fault tests
 * (`faults: true`) kill and restart the server: connect waits are bounded to
 * 5 s, idle connections close after 2 s, and a lone pg Client's "error"
 * event is expected rather than a crash.
 */
export interface OpenOptions {
  faults?: boolean;
  /** `url` is a transaction-mode pooler: postgres.js without prepared statements. */
  pooler?: boolean;
  /** Pool size (default 4); tests/round-trips.test.ts opens one connection, so warming up prepares every statement where it is used. */
  max?: number;
  /** postgres.js: seconds before an idle connection closes (default 1). */
  idleTimeout?: number;
}

/** One row of the driver × runtime matrix. */
export interface DriverSpec {
  /** Stable id, used in result files: `pg-pool`. */
  id: string;
  /** Human label, used as the README row name: `pg Pool`. */
  label: string;
  /** The subpath export the adapter comes from. */
  module: string;
  /** What the user passes in. */
  client: string;
  /** Several connections: the Tier A multi-worker cases run on it. */
  pooled: boolean;
  /** Interactive transactions: false only for Neon HTTP (no consuming). */
  transactions: boolean;
  /** A reason when this runtime cannot run the driver. */
  skip: string | false;
  /** Run by tests/faults*.test.ts; `reconnects`: the client reconnects by itself after its connections die (pools do, one Client does not). */
  faults?: { reconnects: boolean };
  /** Opens a new client and wraps it (PGlite: a new in-memory database; fixtures share one instead, see `fixtureFor`). */
  open(url: string, options?: OpenOptions): Promise<Opened>;
}

/** Bounded connect waits for the fault tests, in milliseconds (pg, Neon). */
const connectWait = (o: OpenOptions | undefined): { connectionTimeoutMillis?: number } => o?.faults ? { connectionTimeoutMillis: 5_000 } : {};

type BunSqlClass = new (url: string, options?: { max?: number; prepare?: boolean }) => BunSqlLike & { close(): Promise<void> };
const BunGlobal = (globalThis as { Bun?: { SQL: BunSqlClass } }).Bun;

let proxy: NeonProxy | undefined;
let shim: NeonHttpShim | undefined;
const restores: (() => void)[] = [];

/** Starts the local Neon stand-ins (WebSocket proxy, HTTP endpoint) and points `neonConfig` at them. */
export async function setupNeon(): Promise<void> {
  if (proxy) return;
  proxy = await startNeonProxy();
  shim = await startNeonHttpShim();
  restores.push(configureNeon(neonConfig, proxy.port), configureNeonHttp(neonConfig, shim.url));
}

/** Restores `neonConfig` exactly as it was and stops the stand-ins. */
export async function teardownNeon(): Promise<void> {
  while (restores.length) restores.pop()!();
  await Promise.all([proxy?.stop(), shim?.stop()]);
  proxy = shim = undefined;
}

/** Traffic through the Neon stand-ins so far (proves a test really used them). */
export function neonTraffic(): { wsConnections: number; httpRequests: number } {
  return { wsConnections: proxy?.connections ?? 0, httpRequests: shim?.requests ?? 0 };
}

let bouncer: Promise<PgBouncer> | undefined;

/** Starts (once) a private transaction-mode PgBouncer in front of `url`'s server; resolves to the URL through it. */
export async function viaPgBouncer(url: string): Promise<string> {
  bouncer ??= startPgBouncer(url);
  const b = await bouncer;
  const u = new URL(url);
  u.hostname = "127.0.0.1";
  u.port = String(b.port);
  return u.toString();
}

/** Stops the PgBouncer `viaPgBouncer` started, if any. */
export async function teardownPgBouncer(): Promise<void> {
  const b = bouncer;
  bouncer = undefined;
  await (await b?.catch(() => undefined))?.stop();
}

/** Every driver the matrix shows, in README order. */
export const driverSpecs: DriverSpec[] = [
  {
    id: "postgres-js",
    label: "postgres.js",
    module: "keyq/postgres-js",
    client: "`postgres(url)`",
    pooled: true,
    transactions: true,
    skip: false,
    faults: { reconnects: true },
    open: (url, o) => {
      const sql = o?.pooler
        ? postgres(url, { max: 4, prepare: false, idle_timeout: 1, onnotice: () => {} }) // a transaction-mode pooler
        : connect(url, o?.faults ? { max: 4, idleTimeout: 2, connectTimeout: 5 } : { max: o?.max ?? 4, idleTimeout: o?.idleTimeout });
      return Promise.resolve({ driver: fromPostgresJs(sql), close: () => sql.end({ timeout: o?.faults ? 1 : 2 }) });
    },
  },
  {
    id: "pg-pool",
    label: "pg Pool",
    module: "keyq/pg",
    client: "`new pg.Pool()`",
    pooled: true,
    transactions: true,
    skip: false,
    faults: { reconnects: true },
    open: (url, o) => {
      const pool = new pg.Pool({ connectionString: url, max: o?.max ?? 4, ...connectWait(o) });
      return Promise.resolve({ driver: fromPg(pool), close: () => pool.end() });
    },
  },
  {
    id: "pg-client",
    label: "pg Client",
    module: "keyq/pg",
    client: "`new pg.Client()` (connected)",
    pooled: false,
    transactions: true,
    skip: false,
    faults: { reconnects: false },
    open: async (url, o) => {
      const client = new pg.Client(url);
      if (o?.faults) client.on("error", () => {}); // the owner of a Client handles its errors (fromPg's contract)
      await client.connect();
      return { driver: fromPg(client), close: () => o?.faults ? client.end().catch(() => {}) : client.end() };
    },
  },
  {
    id: "neon-pool",
    label: "Neon Pool (WebSocket)",
    module: "keyq/neon",
    client: "`new Pool()` from `@neondatabase/serverless`",
    pooled: true,
    transactions: true,
    skip: false,
    faults: { reconnects: true },
    open: async (url, o) => {
      await setupNeon();
      const pool = new NeonPool({ connectionString: url, max: o?.max ?? 4, ...connectWait(o) });
      return { driver: fromNeonPool(pool), close: () => pool.end() };
    },
  },
  {
    id: "neon-client",
    label: "Neon Client (WebSocket)",
    module: "keyq/neon",
    client: "`new Client()` from `@neondatabase/serverless` (connected)",
    pooled: false,
    transactions: true,
    skip: false,
    open: async (url) => {
      await setupNeon();
      const client = new NeonClient(url);
      await client.connect();
      return { driver: fromNeonClient(client), close: () => client.end() };
    },
  },
  {
    id: "neon-http",
    label: "Neon HTTP (`neon()`)",
    module: "keyq/neon",
    client: "`neon(url)` from `@neondatabase/serverless`",
    pooled: false,
    transactions: false,
    skip: false,
    open: async (url) => {
      await setupNeon();
      // Typed as a TxDriver so the shared suites take it: the types refuse its consuming
      // calls, and suites/http.ts proves that each one refuses at run time too.
      return { driver: fromNeonHttp(neon(url)) as TxDriver, close: async () => {} };
    },
  },
  {
    id: "bun-sql",
    label: "Bun.SQL",
    module: "keyq/bun-sql",
    client: "`new Bun.SQL(url)` or Bun's `sql`",
    pooled: true,
    transactions: true,
    skip: !BunGlobal && "Bun.SQL is a global of the Bun runtime only",
    faults: { reconnects: true },
    open: (url, o) => {
      // Behind a transaction pooler Bun.SQL must not prepare (named statements cross connections).
      const sql = new BunGlobal!.SQL(url, o?.pooler ? { max: 4, prepare: false } : { max: o?.max ?? 4 });
      return Promise.resolve({ driver: fromBunSql(sql), close: () => sql.close() });
    },
  },
  {
    id: "pglite",
    label: "PGlite",
    module: "keyq/pglite",
    client: "`new PGlite()` (one connection, in process)",
    pooled: false,
    transactions: true,
    skip: false,
    open: async () => {
      const db = await startPGlite();
      return { driver: fromPGlite(db), close: () => db.close() };
    },
  },
];

/**
 * Pooled drivers through a transaction-mode PgBouncer (pool size 4), as
 * serverless pooled endpoints are: postgres.js, pg Pool and Bun.SQL of
 * `driverSpecs`, opened on the PgBouncer URL (postgres.js and Bun.SQL with
 * `prepare: false`). Run by
 * tests/pooler.test.ts and kept out of the README matrix on purpose: a pooler
 * is a deployment, not a driver.
 */
export const poolerSpecs: DriverSpec[] = driverSpecs.filter((d) => ["postgres-js", "pg-pool", "bun-sql"].includes(d.id)).map((d) => ({
  ...d,
  id: `${d.id}-pgbouncer`,
  label: `${d.label} via PgBouncer`,
  client: d.id === "postgres-js" ? "`postgres(url, { prepare: false })`" : d.id === "bun-sql" ? "`new Bun.SQL(url, { prepare: false })`" : d.client,
  faults: undefined,
  open: async (url: string) => d.open(await viaPgBouncer(url), { pooler: true }),
}));

/** A fixture plus the database URL. */
export type DriverFixture = Fixture & { url: string };

let admin: Sql | undefined;
let migrator: Sql | undefined;
const ready: Promise<string>[] = [];
const pending: Promise<unknown>[] = [];

/** The postgres.js connection every fixture's `raw` uses (one per process). */
function adminSql(url: string): Sql {
  admin ??= connect(url, { max: 2 });
  return admin;
}

/**
 * Migrated schemas are made ahead, in the background, on a connection of
 * their own with `synchronous_commit = off`: installing the engine costs
 * ~250 ms of DDL, more than most cases, and it would otherwise run 150 times
 * per runtime. Migrating through each driver is its own conformance case
 * (`migrateCase`).
 */
function takeSchema(url: string): Promise<string> {
  migrator ??= postgres(url, { max: 2, idle_timeout: 1, onnotice: () => {}, connection: { synchronous_commit: "off" } });
  const make = (): Promise<string> => {
    const schema = freshSchema("kc");
    const p = keyq(fromPostgresJs(migrator!), { schema }).migrate().then(() => schema);
    p.catch(() => {}); // awaited by the taker; this only keeps an early failure from being "unhandled"
    return p;
  };
  while (ready.length < 2) ready.push(make());
  const next = ready.shift()!;
  ready.push(make());
  return next;
}

/** Drops `schema` in the background; `closeShared` waits for it. */
function dropLater(schema: string): void {
  pending.push(migrator!.unsafe(`drop schema if exists "${schema}" cascade`).catch(() => {}));
}

/** Closes what fixtures share: connections, spare schemas, the PGlite, the Neon stand-ins. */
export async function closeShared(): Promise<void> {
  for (const p of ready.splice(0)) {
    const schema = await p.catch(() => null);
    if (schema) dropLater(schema);
  }
  await Promise.all(pending.splice(0));
  await Promise.all([admin?.end({ timeout: 2 }), migrator?.end({ timeout: 2 })]);
  admin = migrator = undefined;
  await closePGlite();
  await teardownNeon();
  await teardownPgBouncer();
}

/**
 * A fixture on `spec`'s driver: a new client of that driver (closed by
 * `close()`), a keyq client over it in a fresh, migrated schema, and `raw`
 * for assertions. PGlite migrates through its own driver, in its own database.
 */
export async function fixtureFor(spec: DriverSpec, url: string, options: Omit<KeyqOptions, "schema"> = {}): Promise<DriverFixture> {
  if (spec.id === "pglite") return { ...(await pgliteFixture(options)), url };
  const sql = adminSql(url);
  const schema = await takeSchema(url);
  let opened: Opened;
  try {
    opened = await spec.open(url);
  } catch (err) {
    dropLater(schema);
    throw err;
  }
  return {
    q: keyq(opened.driver, { ...options, schema }),
    schema,
    url,
    raw: async (text, params) => [...(await sql.unsafe(text, params ?? []))].map((r) => ({ ...r })),
    async close() {
      await opened.close();
      dropLater(schema);
    },
  };
}

/** The conformance case that installs the engine through the driver under test. */
export const migrateCase: Case = {
  name: "migrate installs every migration into an empty schema through this driver, then is a no-op",
  run: (f) =>
    scoped(async (defer) => {
      const schema = freshSchema("km");
      defer(() => f.raw(`drop schema if exists "${schema}" cascade`));
      const q = keyq(f.q.driver, { schema });
      const first = await q.migrate();
      assert.deepEqual([first.from, first.to, first.applied.at(-1), first.functions], [0, latestVersion, latestVersion, "applied"]);
      assert.deepEqual(first.applied, [...first.applied].sort((a, b) => a - b), "applied in order");
      const rows = await f.raw(`select version from "${schema}".migration order by version`);
      assert.deepEqual(rows.map((r) => r.version), first.applied, "one version row per migration");
      assert.deepEqual(await q.migrate(), { from: latestVersion, to: latestVersion, applied: [], functions: "current" });
      assert.equal((await q.createQueue("files")).created, true);
    }),
};
