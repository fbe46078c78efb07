// Least privilege on an existing database (docs/roles.md, "Upgrading"): a
// 0.1 schema (tests/fixtures/keyq-0.1.sql) whose DBA gave roles table rights
// and EXECUTE grants is upgraded by its owner; each role keeps working
// through the keyq grant its table rights amounted to, the DBA's EXECUTE
// grants survive every re-creation of the function set, and revoke() takes
// a role's access back. Private cluster (roles are cluster-wide).
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { after, before, test } from "node:test";
import postgres from "postgres";
import { type Keyq, keyq, KeyqError } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import type { Cluster } from "./helpers/cluster.ts";
import { startCluster } from "./helpers/cluster.ts";
import { dbSkip } from "./helpers/db.ts";
import { sqlAs } from "./helpers/roles.ts";

const skip = await dbSkip();
const fixture = readFileSync(new URL("fixtures/keyq-0.1.sql", import.meta.url), "utf8");
const S = "legacy";
let cluster: Cluster;
let admin: postgres.Sql;
let ownerSql: postgres.Sql;
let owner: Keyq;
const open: postgres.Sql[] = [];

/** A keyq client logged in as `role`. */
function as(role: string): Keyq {
  const sql = sqlAs(cluster, role);
  open.push(sql);
  return keyq(fromPostgresJs(sql), { schema: S });
}

const denied = (e: unknown) => e instanceof KeyqError && e.code === "PERMISSION_DENIED";

before(async () => {
  if (skip) return;
  cluster = await startCluster();
  admin = postgres(cluster.url, { max: 1, onnotice: () => {} });
  await admin.unsafe(`
    create role kq_owner login; grant create on database postgres to kq_owner;
    create role old_app login; create role old_worker login; create role old_admin login; create role monitor login;`);
  ownerSql = sqlAs(cluster, "kq_owner");
  await ownerSql.unsafe(fixture.replaceAll("keyq_fixture_schema", S));
  // What a DBA did for 0.1, whose functions ran with the caller's rights.
  await ownerSql.unsafe(`
    grant usage on schema ${S} to old_app, old_worker, old_admin, monitor;
    grant select on all tables in schema ${S} to old_app, old_worker, old_admin;
    grant insert on ${S}.event to old_app;
    grant insert, update on ${S}.dedup to old_app;
    grant usage on all sequences in schema ${S} to old_app, old_admin;
    grant update, insert, delete on ${S}.cursor, ${S}.retry, ${S}.dead_letter, ${S}.tick to old_worker;
    grant all on all tables in schema ${S} to old_admin;
    revoke execute on all functions in schema ${S} from public;
    grant execute on all functions in schema ${S} to old_app, old_worker, old_admin;
    grant execute on function ${S}.status(text, float8) to monitor;`);
  owner = keyq(fromPostgresJs(ownerSql), { schema: S });
});

after(async () => {
  for (const s of open) await s.end({ timeout: 1 });
  await ownerSql?.end({ timeout: 1 });
  await admin?.end({ timeout: 1 });
  await cluster?.destroy();
});

test("upgrading a 0.1 schema turns the DBA's table rights into keyq grants; every role keeps working", { skip }, async () => {
  const r = await owner.migrate();
  assert.ok(r.applied.includes(11), `applied ${r.applied}`);
  assert.deepEqual(await owner.grants(), [
    { role: "old_admin", produce: ["*"], consume: { "*": ["*"] }, operate: true },
    { role: "old_app", produce: ["*"], consume: {}, operate: false },
    { role: "old_worker", produce: [], consume: { "*": ["*"] }, operate: false },
  ]);
  const adminQ = as("old_admin");
  await adminQ.createQueue("files");
  await adminQ.consumer("files", "indexer").subscribe();
  const sent = await as("old_app").send("files", { type: "t", payload: { n: 1 } });
  const seen: string[] = [];
  const worker = as("old_worker").consumer("files", "indexer");
  for (let i = 0; i < 10 && !seen.includes(sent.id); i++) await worker.run({ handler: (ev) => void seen.push(ev.id) });
  assert.deepEqual(seen, [sent.id]);
  await assert.rejects(as("old_app").consumer("files", "indexer").run({ handler: () => {} }), denied);
  await assert.rejects(as("old_worker").createQueue("x"), denied);
});

test("the DBA's EXECUTE grants survive a re-creation of the function set; PUBLIC does not get EXECUTE back", { skip }, async () => {
  const check = async () => {
    const rows = await admin`
      select has_function_privilege('monitor', ${S + ".status(text, float8, text, int)"}, 'EXECUTE') as monitor,
             (select count(*)::int from pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
               where p.pronamespace = ${S}::regnamespace and a.grantee = 0) as public_grants`;
    return rows[0];
  };
  assert.deepEqual({ ...(await check()) }, { monitor: true, public_grants: 0 });
  await ownerSql.unsafe(`update ${S}.function_set set hash = 'an older set', serial = serial - 1`);
  await owner.migrate();
  assert.deepEqual({ ...(await check()) }, { monitor: true, public_grants: 0 });
  // keyq's own grants are re-applied too: the producer still sends.
  await as("old_app").send("files", { type: "t", payload: 2 });
  // The monitor's EXECUTE is the outer door only: with no keyq grant it sees no queue.
  assert.deepEqual(await as("monitor").status(), []);
});

test("revoke() takes grants back; grant() names unknown roles and queues; only the owner grants", { skip }, async () => {
  await owner.revoke({ role: "old_app", all: true });
  await assert.rejects(as("old_app").send("files", { type: "t", payload: 3 }), denied);
  const privs = await admin`select has_schema_privilege('old_app', ${S}, 'USAGE') as u,
                                   has_function_privilege('old_app', ${S + ".send_batch(text, jsonb, text)"}, 'EXECUTE') as x`;
  assert.deepEqual({ ...privs[0] }, { u: false, x: false });
  await owner.grant({ role: "old_app", produce: ["files"] });
  await as("old_app").send("files", { type: "t", payload: 4 });
  await owner.revoke({ role: "old_worker", consume: { "*": ["*"] } });
  assert.deepEqual((await owner.grants()).find((g) => g.role === "old_worker"), undefined);
  await assert.rejects(owner.grant({ role: "nobody_here", produce: ["files"] }), (e: unknown) => e instanceof KeyqError && e.code === "ROLE_NOT_FOUND");
  await assert.rejects(owner.grant({ role: "old_app", produce: ["nope"] }), (e: unknown) => e instanceof KeyqError && e.code === "QUEUE_NOT_FOUND");
  await assert.rejects(owner.grant({ role: "old_app" }), (e: unknown) => e instanceof KeyqError && e.code === "INVALID_INPUT");
  await assert.rejects(owner.grant({ role: "old_app", produce: ["bad name"] }), (e: unknown) => e instanceof KeyqError && e.code === "INVALID_IDENTIFIER");
  // An operator may list grants but not change them.
  await assert.rejects(as("old_admin").grant({ role: "old_app", operate: true }), denied);
  assert.ok((await as("old_admin").grants()).length >= 2);
  await admin.unsafe(`drop owned by old_worker; drop role old_worker`);
  assert.ok((await owner.grants()).every((g) => g.role !== "old_worker"));
});
