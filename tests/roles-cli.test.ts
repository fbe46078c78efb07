// Grants on the command line (docs/roles.md): `keyq grant|revoke|grants`
// spawned against a private cluster (roles are cluster-wide), `keyq sql
// grant` printing the same grant as SQL for a DBA, and a refused command
// naming the `keyq grant` that would allow it. The flag parsing and the SQL
// text alone: tests/unit/roles.test.ts.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import process from "node:process";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { dbSkip } from "./helpers/db.ts";
import { type RolesFixture, SCHEMA, sqlAs, startRoles, urlAs } from "./helpers/roles.ts";

const skip = await dbSkip();
const root = fileURLToPath(new URL("..", import.meta.url));
let f: RolesFixture;

before(async () => {
  if (!skip) f = await startRoles();
});
after(async () => await f?.close());

/** bin/keyq.ts under the runtime running this file, as `role`. */
function cli(role: string, args: string[]): Promise<{ code: number; out: string; err: string }> {
  const cmd = "Deno" in globalThis
    ? [process.execPath, "run", "--allow-all", "bin/keyq.ts"]
    : "Bun" in globalThis
    ? [process.execPath, "bin/keyq.ts"]
    : [process.execPath, "--import", "tsx", "bin/keyq.ts"];
  const env = { ...process.env, DATABASE_URL: urlAs(f.cluster, role), KEYQ_SCHEMA: SCHEMA };
  return new Promise((resolve) => {
    execFile(cmd[0]!, [...cmd.slice(1), ...args], { cwd: root, env }, (error, out, err) => {
      resolve({ code: error ? Number((error as { code?: number }).code ?? 1) : 0, out, err });
    });
  });
}

test("keyq grant, grants and revoke as the owner; an operator lists but cannot grant", { skip }, async () => {
  const g = await cli("kq_owner", ["grant", "kq_spare", "--produce", "orders,audit", "--consume", "orders:billing,orders:lanes", "--json"]);
  assert.equal(g.code, 0, g.err);
  assert.deepEqual(JSON.parse(g.out), [{
    role: "kq_spare",
    produce: ["audit", "orders"],
    consume: { orders: ["billing", "lanes"] },
    operate: false,
  }]);
  const sent = await cli("kq_spare", ["send", "audit", "t", "{}"]);
  assert.equal(sent.code, 0, sent.err);
  const list = await cli("kq_ops", ["grants"]);
  assert.equal(list.code, 0, list.err);
  assert.match(list.out, /kq_spare\s+│?\s*audit, orders\s+│?\s*orders: billing, lanes/);
  const refused = await cli("kq_ops", ["grant", "kq_spare", "--operate"]);
  assert.equal(refused.code, 1);
  assert.match(refused.err, /PERMISSION_DENIED: permission denied for function grant_access/);
  const r = await cli("kq_owner", ["revoke", "kq_spare", "--all", "--json"]);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(JSON.parse(r.out)[0].produce, []);
  const after = await cli("kq_spare", ["send", "audit", "t", "{}"]);
  assert.equal(after.code, 1);
  assert.match(after.err, /PERMISSION_DENIED/);
});

test("a refused command names the keyq grant that allows it", { skip }, async () => {
  const r = await cli("kq_producer", ["send", "audit", "t", "{}"]);
  assert.equal(r.code, 1);
  assert.match(r.err, /keyq: PERMISSION_DENIED: Role "kq_producer" may not send to queue "audit"; .*keyq grant kq_producer --produce audit/);
  const c = await cli("kq_billing", ["create-queue", "x"]);
  assert.equal(c.code, 1);
  assert.match(c.err, /PERMISSION_DENIED: permission denied for function create_queue: .*"keyq grant <role> --produce … \| --consume … \| --operate"/);
  const t = await cli("kq_billing", ["tick", "orders", "--force"]);
  assert.equal(t.code, 1);
  assert.match(t.err, /Role "kq_billing" may not force ticks: .*keyq grant kq_billing --operate/);
});

test("keyq sql grant prints SQL the owner runs by hand with the same effect", { skip }, async () => {
  const printed = await cli("kq_owner", ["sql", "grant", "kq_spare", "--consume", "audit:reader"]);
  assert.equal(printed.code, 0, printed.err);
  assert.match(printed.out, /^select "kq"\.grant_access\(role => 'kq_spare'/);
  const owner = sqlAs(f.cluster, "kq_owner");
  try {
    await owner.unsafe(printed.out);
  } finally {
    await owner.end({ timeout: 1 });
  }
  assert.deepEqual((await f.owner.grants()).find((g) => g.role === "kq_spare")?.consume, { audit: ["reader"] });
  const revoke = await cli("kq_owner", ["sql", "revoke", "kq_spare", "--all"]);
  assert.match(revoke.out, /revoke_access\(.*every_grant => true\);/);
});
