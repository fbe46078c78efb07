/**
 * The least-privilege fixture (docs/roles.md): a PRIVATE cluster (roles are
 * cluster-wide; never the shared server) with a non-superuser owner that
 * migrates schema "kq", application roles granted in keyq's terms, and the
 * permission matrix the role tests assert: role × operation → allowed or
 * denied (PERMISSION_DENIED), whatever the driver or pooler in between.
 *
 * Queues: orders (consumers billing: plain, lanes: ordered 2 slots, jobs:
 * exclusive, shipping: plain) and audit (consumer reader).
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { type Keyq, keyq, KeyqError } from "../../mod.ts";
import type { TxDriver } from "../../src/driver.ts";
import { fromPostgresJs } from "../../src/drivers/postgres-js.ts";
import { type Cluster, startCluster } from "./cluster.ts";

/** The engine's schema in every role test. */
export const SCHEMA = "kq";

/** Login roles of the matrix, by part. */
export const ROLES = {
  owner: "kq_owner",
  producer: "kq_producer",
  consumer: "kq_billing",
  operator: "kq_ops",
  stranger: "kq_none",
} as const;

/** A matrix row's role part. */
export type Part = keyof typeof ROLES;

/** The roles' URL on the cluster (trust auth: the user name is the login). */
export function urlAs(cluster: Cluster, role: string): string {
  const u = new URL(cluster.url);
  u.username = role;
  return u.toString();
}

/** A postgres.js client of `role` (one connection). */
export function sqlAs(cluster: Cluster, role: string): postgres.Sql {
  return postgres(urlAs(cluster, role), { max: 1, onnotice: () => {} });
}

/** The running fixture. */
export interface RolesFixture {
  cluster: Cluster;
  /** Superuser client (setup and catalog checks only). */
  admin: postgres.Sql;
  /** The owner's postgres.js client and keyq client (it migrated the schema). */
  ownerSql: postgres.Sql;
  owner: Keyq;
  close(): Promise<void>;
}

/**
 * Starts the cluster, creates the roles, migrates as the (non-superuser)
 * owner, creates the queues and consumers, and grants:
 * producer → produce orders; consumer → consume orders/billing, lanes, jobs;
 * operator → operate; stranger → nothing; kq_web (NOLOGIN, reached by the
 * NOINHERIT login kq_auth with SET ROLE) → produce orders, consume orders/billing.
 */
export async function startRoles(): Promise<RolesFixture> {
  const cluster = await startCluster();
  const admin = postgres(cluster.url, { max: 1, onnotice: () => {} });
  let ownerSql: postgres.Sql | undefined;
  try {
    await admin.unsafe(`
      create role kq_owner login;
      grant create on database postgres to kq_owner;
      create role kq_producer login; create role kq_billing login; create role kq_ops login;
      create role kq_none login; create role kq_spare login;
      create role kq_web nologin; create role kq_auth login noinherit; grant kq_web to kq_auth;`);
    ownerSql = sqlAs(cluster, ROLES.owner);
    const owner = keyq(fromPostgresJs(ownerSql), { schema: SCHEMA });
    await owner.migrate();
    for (const q of ["orders", "audit"]) await owner.createQueue(q);
    await owner.consumer("orders", "billing").subscribe();
    await owner.consumer("orders", "shipping").subscribe();
    await owner.ordered("orders", "lanes", { slots: 2 }).subscribe();
    await owner.exclusive("orders", "jobs").subscribe();
    await owner.consumer("audit", "reader").subscribe();
    await owner.grant({ role: ROLES.producer, produce: ["orders"] });
    await owner.grant({ role: ROLES.consumer, consume: { orders: ["billing", "lanes", "jobs"] } });
    await owner.grant({ role: ROLES.operator, operate: true });
    await owner.grant({ role: "kq_web", produce: ["orders"], consume: { orders: ["billing"] } });
    const sql = ownerSql;
    return {
      cluster,
      admin,
      ownerSql: sql,
      owner,
      async close() {
        await sql.end({ timeout: 2 });
        await admin.end({ timeout: 2 });
        await cluster.destroy();
      },
    };
  } catch (err) {
    await ownerSql?.end({ timeout: 1 });
    await admin.end({ timeout: 1 });
    await cluster.destroy();
    throw err;
  }
}

const handler = async () => {};
const run = { handler, maxBatches: 2, budgetMs: 5_000 };

/** One operation of the matrix; `tag` makes its names unique per role and driver. */
export interface Op {
  name: string;
  /** Done by the owner first (e.g. the queue a drop removes). */
  setup?: (owner: Keyq, tag: string) => Promise<unknown>;
  run: (q: Keyq, tag: string) => Promise<unknown>;
}

/** The operations, in matrix column order. */
export const OPS: Op[] = [
  { name: "send orders", run: (q) => q.send("orders", { type: "t", payload: { n: 1 }, key: "k1" }) },
  { name: "send with dedup orders", run: (q, t) => q.send("orders", { type: "t", payload: 1, dedupKey: `d-${t}`, ttl: "1h" }) },
  { name: "send audit", run: (q) => q.send("audit", { type: "t", payload: { n: 1 } }) },
  { name: "run orders/billing (plain)", run: (q) => q.consumer("orders", "billing").run(run) },
  { name: "run orders/lanes (ordered)", run: (q) => q.ordered("orders", "lanes", { slots: 2 }).run(run) },
  { name: "run orders/jobs (exclusive)", run: (q) => q.exclusive("orders", "jobs").run(run) },
  { name: "run orders/shipping", run: (q) => q.consumer("orders", "shipping").run(run) },
  { name: "status orders", run: (q) => q.status({ queue: "orders" }) },
  { name: "dlq orders/billing", run: (q) => q.dlq.list({ queue: "orders", consumer: "billing" }) },
  { name: "dlq orders/shipping", run: (q) => q.dlq.list({ queue: "orders", consumer: "shipping" }) },
  { name: "list queues", run: (q) => q.listQueues() },
  { name: "create queue", run: (q, t) => q.createQueue(`new_${t}`) },
  { name: "subscribe new consumer", run: (q, t) => q.consumer("orders", `new_${t}`).subscribe() },
  { name: "unsubscribe", setup: (o, t) => o.consumer("orders", `gone_${t}`).subscribe(), run: (q, t) => q.consumer("orders", `gone_${t}`).unsubscribe() },
  { name: "force tick", run: (q) => q.tick("orders", { force: true }) },
  { name: "force rotation", run: (q) => q.maintain("orders", { forceRotate: true }) },
  { name: "dlq replay", run: (q) => q.dlq.replayKey("orders", "billing", "k1") },
  { name: "dlq purge", run: (q) => q.dlq.purge({ queue: "orders", consumer: "billing", olderThan: "7d" }) },
  { name: "drop queue", setup: (o, t) => o.createQueue(`drop_${t}`), run: (q, t) => q.dropQueue(`drop_${t}`) },
  { name: "grants", run: (q) => q.grants() },
  { name: "grant", run: (q) => q.grant({ role: "kq_spare", produce: ["audit"] }) },
];

const ALL = OPS.map((o) => o.name);
const allBut = (...no: string[]) => ALL.filter((n) => !no.includes(n));

/** What each role may do: the operations listed are allowed, every other one is denied. */
export const MATRIX: Record<Part, readonly string[]> = {
  owner: ALL,
  producer: ["send orders", "send with dedup orders", "status orders"],
  consumer: [
    "run orders/billing (plain)",
    "run orders/lanes (ordered)",
    "run orders/jobs (exclusive)",
    "status orders",
    "dlq orders/billing",
  ],
  operator: allBut("grant"),
  stranger: [],
};

/** Runs every operation as `q` and asserts the matrix row of `part`; returns the row as [op, "allowed"|"denied"]. */
export async function assertRow(part: Part, q: Keyq, owner: Keyq, tag: string): Promise<[string, string][]> {
  const row: [string, string][] = [];
  for (const op of OPS) {
    await op.setup?.(owner, tag);
    const expected = MATRIX[part].includes(op.name);
    let error: unknown;
    try {
      await op.run(q, tag);
    } catch (err) {
      error = err;
    }
    if (expected) assert.equal(error, undefined, `${part} (${tag}) may ${op.name}, but: ${String((error as Error)?.message)}`);
    else {
      assert.ok(
        error instanceof KeyqError && error.code === "PERMISSION_DENIED",
        `${part} (${tag}) must be refused "${op.name}" with PERMISSION_DENIED, got ${error === undefined ? "success" : String((error as Error)?.stack)}`,
      );
    }
    row.push([op.name, error === undefined ? "allowed" : "denied"]);
  }
  return row;
}

/** A keyq client in schema kq over `driver`. */
export const client = (driver: TxDriver): Keyq => keyq(driver, { schema: SCHEMA });
