// Least privilege (docs/roles.md): the engine's functions are the only door.
// An application role reaches no table (no forged event, no foreign cursor,
// no foreign dedup claim, no payload read), no internal function and no
// sequence; every function of the schema has the pinned search_path and no
// PUBLIC EXECUTE; a hostile operator earlier in the caller's search_path
// changes nothing; and SET ROLE (Supabase's authenticator pattern) counts
// the role set, never a role the login could not set. Private cluster.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import { KeyqError } from "../mod.ts";
import { fromPg } from "../src/drivers/pg.ts";
import { ENGINE } from "../src/engine/calls.ts";
import { dbSkip } from "./helpers/db.ts";
import { client, ROLES, type RolesFixture, sqlAs, startRoles, urlAs } from "./helpers/roles.ts";

const skip = await dbSkip();
let f: RolesFixture;

before(async () => {
  if (!skip) f = await startRoles();
});
after(async () => await f?.close());

/** The SQLSTATE `text` fails with as `role` (undefined: it succeeded). */
async function stateOf(role: string, text: string): Promise<string | undefined> {
  const sql = sqlAs(f.cluster, role);
  try {
    await sql.unsafe(text);
    return undefined;
  } catch (err) {
    return (err as { code?: string }).code;
  } finally {
    await sql.end({ timeout: 1 });
  }
}

const DENIED = ["42501", "KQ020"]; // no privilege (Postgres), PERMISSION_DENIED (the engine)

test("forged events: a producer cannot insert into the log, pick an id or draw from a sequence", { skip }, async () => {
  const forged = [
    `insert into kq.event (queue_id, ev_table, ev_id, ev_type, ev_data) values (1, 0, 424242, 'forged', '{}')`,
    `insert into kq.event_1_0 (queue_id, ev_table, ev_id, ev_type, ev_data) values (1, 0, 424242, 'forged', '{}')`,
    `select nextval((select event_seq from kq.queue where queue_name = 'orders'))`,
    `select nextval('kq.tick_id_seq')`,
    `select kq.claim_dedup(null, 'k', 60)`,
    `insert into kq.tick (queue_id, tick_id, tick_snapshot, tick_event_seq) values (1, 99, pg_current_snapshot(), 0)`,
  ];
  for (const role of [ROLES.producer, ROLES.consumer, ROLES.operator]) {
    for (const text of forged) assert.ok(DENIED.includes((await stateOf(role, text))!), `${role}: ${text}`);
  }
  const rows = await f.admin`select count(*)::int as n from kq.event where ev_id = 424242 or ev_type = 'forged'`;
  assert.equal(rows[0]!.n, 0);
  // Through the engine, ids come from the queue's sequence only: send takes no id.
  const sent = await f.admin`select max(ev_id)::text as id from kq.event`;
  const sql = sqlAs(f.cluster, ROLES.producer);
  try {
    const r = await sql`select kq.send('orders', 't', '{}'::jsonb)::text as r`;
    assert.ok(BigInt(JSON.parse(r[0]!.r).id) > BigInt(sent[0]!.id ?? "0"));
  } finally {
    await sql.end({ timeout: 1 });
  }
});

test("foreign cursors: the billing role cannot read, move or ack another consumer's cursor", { skip }, async () => {
  const role = ROLES.consumer;
  for (
    const text of [
      `update kq.cursor set tick_id = 0`,
      `select * from kq.cursor`,
      `delete from kq.retry`,
      `select kq.receive('orders', 'shipping', 10)`,
      `select kq.receive_plain('orders', 'shipping', 10)`,
      `select kq.ack('orders', 'shipping', 0, '{"retried":[],"failed":[],"deferred":[],"held":[],"released":[]}')`,
      `select kq.fence('orders', 'shipping', 0, array['k'], 'me', 1000)`,
      `select kq.unsubscribe('orders', 'shipping')`,
      `select kq.receive('audit', 'reader', 10)`,
      `select kq.dlq_requeue(array[1::bigint])`,
      `select kq.window_events(1, pg_current_snapshot(), pg_current_snapshot(), null, null, 10)`,
    ]
  ) assert.ok(DENIED.includes((await stateOf(role, text))!), text);
  const cur = await f.admin`select count(*)::int as n from kq.consumer where consumer_name = 'shipping'`;
  assert.equal(cur[0]!.n, 1, "shipping is still subscribed");
});

test("foreign dedup: a producer can neither read dedup keys nor expire another producer's live claim", { skip }, async () => {
  const owner = f.owner;
  const first = await owner.send("audit", { type: "t", payload: 1, dedupKey: "audit-live", ttl: "1h" });
  for (
    const text of [
      `select dedup_key from kq.dedup`,
      `update kq.dedup set expires_at = now() - interval '1 day'`,
      `delete from kq.dedup`,
      `select kq.dedup_gc(2, 100)`,
      `select kq.send('audit', 't', '2'::jsonb, null, 'audit-live', 60)`,
    ]
  ) assert.ok(DENIED.includes((await stateOf(ROLES.producer, text))!), text);
  const again = await owner.send("audit", { type: "t", payload: 3, dedupKey: "audit-live", ttl: "1h" });
  assert.deepEqual(again, { id: first.id, deduped: true }, "the live claim still holds");
});

test("payload reads: only a consumer of the queue reads payloads, and only through its consumer", { skip }, async () => {
  for (const role of [ROLES.producer, ROLES.consumer, ROLES.stranger]) {
    for (
      const text of [
        `select ev_data from kq.event`,
        `select ev_data from kq.event_2_0`,
        `select ev_data from kq.retry`,
        `select ev_data from kq.dead_letter`,
        `select kq.dlq_list('{}', 10)`,
        `select kq.event_json(null)`,
      ]
    ) assert.ok(DENIED.includes((await stateOf(role, text))!), `${role}: ${text}`);
  }
  assert.ok(DENIED.includes((await stateOf(ROLES.producer, `select kq.receive('orders', 'billing', 10)`))!));
});

test("no PUBLIC EXECUTE, a pinned search_path on every function but the inlined slot_of, SECURITY DEFINER on the entry functions", { skip }, async () => {
  const rows = await f.admin`
    select p.proname, p.prosecdef, p.proconfig,
           exists (select 1 from aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                    where a.grantee = 0) as public_exec
      from pg_proc p where p.pronamespace = 'kq'::regnamespace`;
  assert.ok(rows.length > 60);
  for (const r of rows) {
    assert.equal(r.public_exec, false, `${r.proname}: PUBLIC may execute it`);
    // slot_of must inline (a SET clause would prevent it): it qualifies every operator (tests/engine-contract.test.ts).
    if (r.proname !== "slot_of") assert.ok((r.proconfig as string[] | null)?.includes("search_path=pg_catalog, pg_temp"), `${r.proname}: ${r.proconfig}`);
  }
  const definer = rows.filter((r) => r.prosecdef).map((r) => r.proname as string);
  // Every function the client calls (src/engine/declarations.ts) is an entry: SECURITY DEFINER and checked
  // first thing. A new engine function missing from entry_functions() fails here (it would be owner-only).
  const src = await f.admin`select proname, prosrc from pg_proc where pronamespace = 'kq'::regnamespace`;
  for (const e of Object.values(ENGINE)) {
    assert.ok(definer.includes(e.name), `${e.name} is SECURITY DEFINER (add it to entry_functions())`);
    assert.match(String(src.find((r) => r.proname === e.name)?.prosrc), /\.authorize\(/, `${e.name} calls authorize()`);
  }
  for (const fn of definer) assert.match(String(src.find((r) => r.proname === fn)?.prosrc), /\.authorize\(/, `${fn} calls authorize()`);
  for (const fn of ["send", "send_batch", "receive_plain", "ack", "tick", "maintain", "subscribe", "grant_access"]) assert.ok(definer.includes(fn), fn);
  for (const fn of ["claim_dedup", "window_events", "get_queue", "permits", "caller"]) assert.ok(!definer.includes(fn), fn);
  const usage = await f.admin`select has_schema_privilege('kq_none', 'kq', 'USAGE') as u`;
  assert.equal(usage[0]!.u, false, "a role without grants may not even look into the schema");
});

test("a hostile = operator and functions earlier in the caller's search_path change nothing; a SECURITY DEFINER wrapper lends no grant", { skip }, async () => {
  await f.admin.unsafe(`create schema evil authorization kq_producer`);
  const sql = sqlAs(f.cluster, ROLES.producer);
  try {
    await sql.unsafe(`
      create function evil.yes(text, text) returns boolean language sql as 'select true';
      create operator evil.= (leftarg = text, rightarg = text, function = evil.yes);
      create function evil.pg_has_role(oid, name, text) returns boolean language sql as 'select true';
      create function evil.current_setting(text) returns text language sql as $$select 'kq_owner'$$;`);
    await sql.unsafe(`set search_path = evil, pg_catalog, public`);
    const r = await sql.unsafe(`select 'a'::text = 'b'::text as hijacked`);
    assert.equal(r[0]!.hijacked, true, "the hostile operator is live in this session");
    await assert.rejects(sql.unsafe(`select kq.send('audit', 't', '{}'::jsonb)`), (e: { code?: string }) => e.code === "KQ020");
    await assert.rejects(sql.unsafe(`select kq.create_queue('evil_q')`), (e: { code?: string }) => DENIED.includes(e.code!));
    // A SECURITY DEFINER wrapper does not lend its owner's grants: the session's role is checked.
    await sql.unsafe(`
      create function evil.proxy() returns jsonb language sql security definer as $$select kq.send('orders', 't', '{}'::jsonb)$$;
      grant usage on schema evil to kq_none; grant execute on function evil.proxy() to kq_none;`);
    await sql.unsafe(`select evil.proxy()`); // its owner may
    assert.equal(await stateOf(ROLES.stranger, `select evil.proxy()`), "KQ020");
  } finally {
    await sql.end({ timeout: 1 });
    await f.admin.unsafe(`drop schema evil cascade`);
  }
});

test("SET ROLE: a NOINHERIT login gets its group's grants only after SET ROLE, and cannot set a role it is not a member of", { skip }, async () => {
  const c = new pg.Client(urlAs(f.cluster, "kq_auth"));
  await c.connect();
  try {
    const q = client(fromPg(c));
    const denied = (e: unknown) => e instanceof KeyqError && e.code === "PERMISSION_DENIED";
    await assert.rejects(q.send("orders", { type: "t", payload: 1 }), denied, "the login alone has no grant");
    await assert.rejects(c.query("set role kq_ops"), (e: { code?: string }) => e.code === "42501");
    await assert.rejects(c.query("select set_config('role', 'kq_owner', false)"), (e: { code?: string }) => e.code === "42501");
    await c.query("set role kq_web");
    await q.send("orders", { type: "t", payload: 1 });
    const report = await q.consumer("orders", "billing").run({ handler: () => {}, maxBatches: 2 });
    assert.ok(report.batches >= 0);
    await assert.rejects(q.send("audit", { type: "t", payload: 1 }), denied, "kq_web produces to orders only");
    await assert.rejects(q.consumer("orders", "shipping").run({ handler: () => {}, maxBatches: 1 }), denied);
    await assert.rejects(q.createQueue("web_q"), denied);
    await c.query("reset role");
    await assert.rejects(q.send("orders", { type: "t", payload: 1 }), denied, "back to the login: no grant");
    // SET LOCAL ROLE lasts one transaction (how PostgREST and poolers use it).
    await c.query("begin");
    await c.query("set local role kq_web");
    const inTx = await c.query(`select kq.send('orders', 't', '1'::jsonb)::text as r`);
    await c.query("commit");
    assert.equal(JSON.parse(inTx.rows[0].r).deduped, false);
    await assert.rejects(q.send("orders", { type: "t", payload: 1 }), denied);
  } finally {
    await c.end();
  }
});

test("ALTER ROLE … SET role and startup options cannot make a login act as a role it is not a member of", { skip }, async () => {
  await f.admin.unsafe(`alter role kq_producer set role = 'kq_owner'`);
  try {
    const sql = sqlAs(f.cluster, ROLES.producer);
    try {
      const r = await sql`select current_setting('role') as role`;
      assert.equal(r[0]!.role, "none", "the stored setting is ignored at login");
      await assert.rejects(sql.unsafe(`select kq.create_queue('x')`), (e: { code?: string }) => DENIED.includes(e.code!));
    } finally {
      await sql.end({ timeout: 1 });
    }
  } finally {
    await f.admin.unsafe(`alter role kq_producer reset role`);
  }
  const u = new URL(urlAs(f.cluster, ROLES.producer));
  u.searchParams.set("options", "-c role=kq_owner");
  const c = new pg.Client(u.toString());
  await assert.rejects(c.connect(), (e: { code?: string }) => e.code === "42501");
  await c.end().catch(() => {});
});
