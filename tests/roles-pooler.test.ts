// Least privilege (docs/roles.md) behind a transaction-mode pooler: every
// role of the matrix (tests/helpers/roles.ts) through PgBouncer with
// postgres.js (no prepared statements), pg Pool and Bun.SQL (under Bun);
// and one login behind
// the pooler that takes a role per transaction with SET LOCAL ROLE, whose
// grants last exactly that transaction although PgBouncer hands the same
// server connection to the next one. Private cluster and PgBouncer.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import postgres from "postgres";
import { KeyqError } from "../mod.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { dbSkip } from "./helpers/db.ts";
import { driverSpecs } from "./helpers/drivers.ts";
import { type PgBouncer, pgBouncerBinary, startPgBouncer } from "./helpers/pgbouncer.ts";
import { assertRow, client, MATRIX, type Part, ROLES, type RolesFixture, startRoles } from "./helpers/roles.ts";

const skip = (await dbSkip()) || (pgBouncerBinary() ? false : "pgbouncer is not installed");
let f: RolesFixture;
let bouncer: PgBouncer;

before(async () => {
  if (skip) return;
  f = await startRoles();
  // One server connection per user: every transaction of a user reuses it.
  bouncer = await startPgBouncer(f.cluster.url, { poolSize: 1, users: [...Object.values(ROLES), "kq_auth"] });
});
after(async () => {
  await bouncer?.stop();
  await f?.close();
});

/** The URL of `role` through PgBouncer. */
const pooled = (role: string): string => {
  const u = new URL(bouncer.url);
  u.username = role;
  return u.toString();
};

for (const id of ["postgres-js", "pg-pool", "bun-sql"]) {
  const spec = driverSpecs.find((d) => d.id === id)!;
  for (const part of Object.keys(ROLES) as Part[]) {
    test(`PgBouncer (transaction mode) + ${spec.label}: ${part} can do exactly its matrix row`, { skip: skip || spec.skip }, async () => {
      const opened = await spec.open(pooled(ROLES[part]), { pooler: true });
      try {
        const row = await assertRow(part, client(opened.driver), f.owner, `${part}_pgb_${id.replaceAll("-", "_")}`);
        assert.deepEqual(row.filter(([, r]) => r === "allowed").map(([op]) => op), [...MATRIX[part]]);
      } finally {
        await opened.close();
      }
    });
  }
}

test("one login behind the pooler: SET LOCAL ROLE grants for one transaction, never the next", { skip }, async () => {
  const sql = postgres(pooled("kq_auth"), { max: 2, prepare: false, onnotice: () => {} });
  try {
    const backends = new Set<number>();
    let allowed = 0;
    let denied = 0;
    for (let i = 0; i < 6; i++) {
      const asWeb = i % 2 === 0;
      try {
        await sql.begin(async (tx) => {
          const pid = await tx`select pg_backend_pid() as pid`;
          backends.add(pid[0]!.pid);
          if (asWeb) await tx`set local role kq_web`;
          await tx`select kq.send('orders', 't', '{}'::jsonb)`;
        });
        allowed++;
        assert.ok(asWeb, "only a transaction that set the role may send");
      } catch (err) {
        assert.ok(["42501", "KQ020"].includes((err as { code?: string }).code!), String(err));
        assert.ok(!asWeb, String(err));
        denied++;
      }
    }
    assert.deepEqual({ allowed, denied }, { allowed: 3, denied: 3 });
    assert.equal(backends.size, 1, "PgBouncer ran every transaction on the one server connection");
  } finally {
    await sql.end({ timeout: 2 });
  }
});

test("one login behind the pooler, keyq's own calls: a role set on the pooled connection is the caller", { skip }, async () => {
  // A session-level SET ROLE survives on PgBouncer's server connection (the
  // docs say: use SET LOCAL ROLE per transaction); the engine checks the
  // role that is set, so the pooled keyq client acts as kq_web here.
  const pool = new pg.Pool({ connectionString: pooled("kq_auth"), max: 1 });
  try {
    const q = client(fromPg(pool));
    const denied = (e: unknown) => e instanceof KeyqError && e.code === "PERMISSION_DENIED";
    await assert.rejects(q.send("orders", { type: "t", payload: 1 }), denied);
    await pool.query("set role kq_web");
    await q.send("orders", { type: "t", payload: 1 });
    await q.consumer("orders", "billing").run({ handler: () => {}, maxBatches: 1 });
    await assert.rejects(q.send("audit", { type: "t", payload: 1 }), denied);
    await pool.query("reset role");
    await assert.rejects(q.send("orders", { type: "t", payload: 1 }), denied);
  } finally {
    await pool.end();
  }
});
