// Least privilege (docs/roles.md), a login per role: each role of the
// matrix (tests/helpers/roles.ts) connects with its own login through every
// pooled driver — postgres.js, pg Pool, Neon's WebSocket Pool — and does
// every operation; the allowed ones succeed, the others fail with
// PERMISSION_DENIED. Runs on a private cluster (roles are cluster-wide).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { driverSpecs, teardownNeon } from "./helpers/drivers.ts";
import { dbSkip } from "./helpers/db.ts";
import { assertRow, client, MATRIX, OPS, type Part, ROLES, type RolesFixture, startRoles, urlAs } from "./helpers/roles.ts";

const skip = await dbSkip();
let f: RolesFixture;

before(async () => {
  if (!skip) f = await startRoles();
});
after(async () => {
  await teardownNeon();
  await f?.close();
});

const DRIVERS = ["postgres-js", "pg-pool", "neon-pool", "bun-sql"]; // Bun.SQL under Bun only (its spec skips elsewhere)

for (const id of DRIVERS) {
  const spec = driverSpecs.find((d) => d.id === id)!;
  for (const part of Object.keys(ROLES) as Part[]) {
    test(`${spec.label}: ${part} (${ROLES[part]}) can do exactly its matrix row`, { skip: skip || spec.skip }, async () => {
      const opened = await spec.open(urlAs(f.cluster, ROLES[part]));
      try {
        const row = await assertRow(part, client(opened.driver), f.owner, `${part}_${id.replaceAll("-", "_")}`);
        assert.deepEqual(
          row.filter(([, r]) => r === "allowed").map(([op]) => op),
          [...MATRIX[part]],
        );
      } finally {
        await opened.close();
      }
    });
  }
}

test("a consumer-only role's run() ticks, maintains and consumes its events without any table right", { skip }, async () => {
  const producer = await driverSpecs[0]!.open(urlAs(f.cluster, ROLES.producer));
  const worker = await driverSpecs[0]!.open(urlAs(f.cluster, ROLES.consumer));
  try {
    const sent = await client(producer.driver).sendBatch("orders", [1, 2, 3].map((n) => ({ type: "n", payload: { n }, key: `k${n}` })));
    const seen: string[] = [];
    const w = client(worker.driver);
    for (let i = 0; i < 20 && !sent.every((s) => seen.includes(s.id)); i++) {
      await w.consumer("orders", "billing").run({ handler: (ev) => void seen.push(ev.id), budgetMs: 5_000 });
    }
    assert.ok(sent.every((s) => seen.includes(s.id)), `billing saw ${seen.length} events, not the 3 sent`);
    const rights = await f.admin`
      select count(*)::int as n from information_schema.role_table_grants
       where grantee in ('kq_billing', 'kq_producer', 'kq_ops') and table_schema = 'kq'`;
    assert.equal(rights[0]!.n, 0, "application roles hold no table right");
  } finally {
    await producer.close();
    await worker.close();
  }
});

test("status and dead letters show a consumer role only its own consumers", { skip }, async () => {
  const worker = await driverSpecs[0]!.open(urlAs(f.cluster, ROLES.consumer));
  try {
    const st = await client(worker.driver).status();
    assert.deepEqual(st.map((s) => s.queue), ["orders"]);
    assert.deepEqual(st[0]!.consumers.map((c) => c.name).sort(), ["billing", "jobs", "lanes"]);
    const all = await client(worker.driver).dlq.count({}).catch((e) => e.code);
    assert.equal(all, "PERMISSION_DENIED", "dead letters of every consumer are not a consumer role's");
  } finally {
    await worker.close();
  }
});

test(`the matrix covers ${OPS.length} operations for every role`, () => {
  for (const part of Object.keys(MATRIX) as Part[]) for (const op of MATRIX[part]) assert.ok(OPS.some((o) => o.name === op), op);
});
