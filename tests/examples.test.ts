// Runs every example in examples/ against the test database, each in a fresh
// schema (KEYQ_SCHEMA), with the very command its header comment gives
// (headerCommands reads it; only "postgres://…" becomes the test database and
// the runtime word becomes this runtime's binary): the test subscribes the
// example's consumer, sends events, starts the example, and checks that it
// printed every event it consumed and left nothing behind. Each runtime's
// pass runs the examples written for it (Deno: deno-cron; Bun: bun-sql;
// Node: node-worker and the Cloudflare Worker inside workerd via miniflare);
// the Vercel route handler is a plain function, called in every runtime.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import process from "node:process";
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { databaseUrl, dbSkip } from "./helpers/db.ts";
import { type Defer, type PgFixture, withPg } from "./helpers/fixture.ts";
import { runtimeName, setupNeon, teardownNeon } from "./helpers/drivers.ts";

const skip = await dbSkip();
const runtime = runtimeName();
const root = fileURLToPath(new URL("..", import.meta.url));
const only = (r: string): string | false => runtime !== r && `runs in the ${r} pass (npm run test:${r})`;

type Fx = PgFixture;

/** A fresh schema with the "jobs" queue, `consumer` subscribed, and `n` keyed events sent. */
async function withSeed(consumer: string, n: number, body: (seeded: { f: Fx; ids: string[] }, defer: Defer) => Promise<void>): Promise<void> {
  await withPg({ max: 2 }, async (f, defer) => {
    await f.q.createQueue("jobs");
    await f.q.exclusive("jobs", consumer).subscribe();
    const sent = await f.q.sendBatch("jobs", Array.from({ length: n }, (_, i) => ({ type: "Job", payload: { n: i }, key: `tenant-${i % 3}` })));
    await body({ f, ids: sent.map((s) => s.id) }, defer);
  });
}

/** Asserts `out` names every id once as consumed, and the consumer has nothing left. */
async function consumedAll(f: Fx, consumer: string, ids: string[], out: string): Promise<void> {
  const seen = [...out.matchAll(/consumed (\d+) Job key=tenant-\d payload=\{"n":\d+\}/g)].map((m) => m[1]!);
  assert.deepEqual([...seen].sort(), [...ids].sort(), `the example printed each event once:\n${out}`);
  const again = await f.q.exclusive("jobs", consumer).run({ handler: () => assert.fail("nothing should be left") });
  assert.equal(again.events, 0);
}

interface Spawned {
  done: Promise<{ code: number | null; out: string }>;
  output(): string;
  kill(signal: "SIGTERM" | "SIGINT"): void;
}

/** Starts `cmd args` in the repository root with the test database and schema in its environment. */
function start(cmd: string, args: string[], env: Record<string, string>, unset: string[] = []): Spawned {
  const full: Record<string, string | undefined> = { ...process.env, ...env };
  for (const name of unset) delete full[name];
  const child = spawn(cmd, args, { cwd: root, env: full, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout!.on("data", (d) => (out += String(d)));
  child.stderr!.on("data", (d) => (out += String(d)));
  const done = new Promise<{ code: number | null; out: string }>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, out }));
  });
  const timer = setTimeout(() => child.kill("SIGKILL"), 180_000); // a loaded machine: PGlite alone can take 30 s
  done.finally(() => clearTimeout(timer)).catch(() => {});
  return { done, output: () => out, kill: (s) => child.kill(s) };
}

/** The shell commands in a file's header comment that run an example: `[VAR=value …] node|deno|bun … examples/…`. */
export function headerCommands(text: string): string[] {
  const header = text.slice(0, text.indexOf("*/"));
  return [...header.matchAll(/^\s*\*\s+((?:[A-Z_]+=\S+\s+)*(?:node|deno|bun)\s+(?:.*?\s)?examples\/\S+)(?:\s+#.*)?$/gm)].map((m) => m[1]!.trim());
}

/** A header command as spawn arguments: its env assignments (the database URL made real), this runtime's binary, its words. */
export function commandToSpawn(line: string, url: string): { cmd: string; args: string[]; env: Record<string, string>; unset: string[] } {
  const words = line.split(/\s+/);
  const env: Record<string, string> = {};
  while (/^[A-Z_]+=/.test(words[0]!)) {
    const [name, ...value] = words.shift()!.split("=");
    env[name!] = value.join("=").replace(/^postgres:\/\/…$/, url);
  }
  const runtime = words.shift()!;
  assert.equal(runtime, runtimeName(), `"${line}" runs under ${runtime}: run it in that runtime's pass`);
  // A command without DATABASE_URL means "no database" (embedded PGlite): unset the test's.
  return { cmd: process.execPath, args: words, env, unset: "DATABASE_URL" in env ? [] : ["DATABASE_URL"] };
}

/** The header commands of `file` (relative to the repository), checked to be `count`. */
function commandsOf(file: string, count: number): string[] {
  const found = headerCommands(readFileSync(`${root}/${file}`, "utf8"));
  assert.equal(found.length, count, `${file} has ${count} command(s) in its header: ${JSON.stringify(found)}`);
  return found;
}

/** Starts a header command with extra environment (the schema, a worker name…). */
function startHeader(line: string, url: string, extra: Record<string, string> = {}): Spawned {
  const { cmd, args, env, unset } = commandToSpawn(line, url);
  return start(cmd, args, { ...env, ...extra }, unset);
}

async function waitFor(what: () => boolean, ms: number, label: () => string): Promise<void> {
  const until = Date.now() + ms;
  while (!what()) {
    if (Date.now() > until) assert.fail(`timed out: ${label()}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe(`examples (${runtime})`, () => {
  test("examples/deno-cron.ts: the cron job, run once, consumes the backlog", { skip: skip || only("deno") }, async () => {
    await withSeed("deno-cron", 7, async ({ f, ids }) => {
      // The header's command has --unstable-cron (a schedule every minute); KEYQ_ONCE=1 makes it run once.
      const [line] = commandsOf("examples/deno-cron.ts", 1);
      const { code, out } = await startHeader(line!, f.url, { KEYQ_SCHEMA: f.schema, KEYQ_ONCE: "1" }).done;
      console.log(out.trim());
      assert.equal(code, 0, out);
      assert.match(out, /run: 7 events/);
      await consumedAll(f, "deno-cron", ids, out);
    });
  });

  test("examples/bun-sql.ts: one run over Bun.SQL consumes the backlog", { skip: skip || only("bun") }, async () => {
    await withSeed("bun-sql", 7, async ({ f, ids }) => {
      const [line] = commandsOf("examples/bun-sql.ts", 1);
      const { code, out } = await startHeader(line!, f.url, { KEYQ_SCHEMA: f.schema }).done;
      console.log(out.trim());
      assert.equal(code, 0, out);
      assert.match(out, /run: 7 events/);
      await consumedAll(f, "bun-sql", ids, out);
    });
  });

  test("examples/node-worker.ts: two workers share the backlog, then stop cleanly on SIGTERM and SIGINT", { skip: skip || only("node") }, async () => {
    await withSeed("node-worker", 0, async ({ f }) => {
      const [line] = commandsOf("examples/node-worker.ts", 1);
      const workers = ["a", "b"].map((w) => startHeader(line!, f.url, { KEYQ_SCHEMA: f.schema, WORKER: w }));
      const all = () => workers.map((w) => w.output()).join("");
      await waitFor(() => workers.every((w) => w.output().includes(": working")), 30_000, all);
      const sent = await f.q.sendBatch("jobs", Array.from({ length: 30 }, (_, i) => ({ type: "Job", payload: { n: i }, key: `tenant-${i % 3}` })));
      const ids = sent.map((s) => s.id);
      await waitFor(() => (all().match(/consumed /g) ?? []).length >= ids.length, 30_000, all);
      workers[0]!.kill("SIGTERM");
      workers[1]!.kill("SIGINT");
      const results = await Promise.all(workers.map((w) => w.done));
      const out = results.map((r) => r.out).join("");
      console.log(out.trim());
      assert.deepEqual(results.map((r) => r.code), [0, 0], out);
      assert.match(out, /a: SIGTERM, finishing the current batch\na: stopped after \d+ events/);
      assert.match(out, /b: SIGINT, finishing the current batch\nb: stopped after \d+ events/);
      await consumedAll(f, "node-worker", ids, out);
    });
  });

  test("examples/cloudflare-worker: scheduled() inside workerd (miniflare) consumes over cloudflare:sockets", { skip: skip || only("node") }, async () => {
    await withSeed("cf-cron", 7, async ({ f, ids }) => {
      const [line] = commandsOf("examples/cloudflare-worker/run.ts", 1);
      const { code, out } = await startHeader(line!, f.url, { KEYQ_SCHEMA: f.schema }).done;
      console.log(out.trim());
      assert.equal(code, 0, out);
      assert.match(out, /cron "\* \* \* \* \*": 7 events/);
      assert.match(out, /scheduled\(\) outcome: ok/);
      await consumedAll(f, "cf-cron", ids, out);
    });
  });

  test("npm run demo (the README's first command): runs to the end on embedded PGlite without DATABASE_URL", { skip: only("node") }, async () => {
    const npm = process.platform === "win32" ? "npm.cmd" : "npm";
    const { code, out } = await start(npm, ["run", "demo"], {}, ["DATABASE_URL"]).done;
    assert.equal(code, 0, out);
    assert.match(out, /== Queue =+/);
    assert.match(out, /maintain\(\): /);
  });

  test(
    "examples/tier-a-migrations.ts: both header commands (PGlite, then DATABASE_URL) migrate every tenant once",
    { skip: skip || only("node") },
    async () => {
      const url = (await databaseUrl())!;
      for (const line of commandsOf("examples/tier-a-migrations.ts", 2)) {
        const { code, out } = await startHeader(line, url).done;
        console.log(`$ ${line}\n${out.trim()}`);
        assert.equal(code, 0, out);
        assert.match(out, /invocation 3: \d+ more, nothing left to enqueue/);
        assert.equal((out.match(/│ '(acme|globex|initech|umbrella)' +│ +3 +│/g) ?? []).length, 4, `every tenant at version 3:\n${out}`);
      }
    },
  );

  test("examples/tier-b-lifecycle.ts: both header commands run in a throwaway schema and leave KEYQ_SCHEMA alone", { skip: skip || only("node") }, async () => {
    const url = (await databaseUrl())!;
    // A user's schema named by KEYQ_SCHEMA, with something in it: the example must not drop it.
    await withPg({ max: 1 }, async (f) => {
      await f.q.createQueue("files");
      const [pglite, real] = commandsOf("examples/tier-b-lifecycle.ts", 2);
      const local = await startHeader(pglite!, url, { KEYQ_SCHEMA: f.schema }).done;
      console.log(local.out.trim());
      assert.equal(local.code, 0, local.out);
      assert.match(local.out, /embedded PGlite/);
      assert.equal((local.out.match(/'\/a\.txt' +│ +'11' +│ +'2'/g) ?? []).length, 3, `each tenant's /a.txt overwritten once, /b.txt deleted:\n${local.out}`);
      const remote = await startHeader(real!, url, { KEYQ_SCHEMA: f.schema }).done;
      console.log(remote.out.trim());
      assert.equal(remote.code, 0, remote.out);
      assert.match(remote.out, /worker 0\/3: \d+ events/);
      const own = /schema (lifecycle_[0-9a-f]{8})/.exec(remote.out)?.[1];
      assert.ok(own, remote.out);
      assert.deepEqual(await f.raw("select 1 from pg_namespace where nspname = $1", [own]), [], "its own schema is dropped");
      assert.equal((await f.q.listQueues()).map((q) => q.name).join(), "files", "the KEYQ_SCHEMA schema and its queue are intact");
    });
  });

  test("examples/vercel-cron-route.ts: GET runs once over a Neon Pool and returns the report; no or a wrong secret gets 401, an unset CRON_SECRET 503", {
    skip,
  }, async () => {
    await withSeed("vercel-cron", 7, async ({ f, ids }, defer) => {
      const saved = { ...process.env };
      defer(() => {
        for (const k of ["DATABASE_URL", "KEYQ_SCHEMA", "CRON_SECRET"]) {
          if (saved[k] === undefined) delete process.env[k];
          else process.env[k] = saved[k];
        }
      });
      await setupNeon();
      defer(teardownNeon);
      Object.assign(process.env, { DATABASE_URL: f.url, KEYQ_SCHEMA: f.schema });
      delete process.env.CRON_SECRET;
      const { GET } = await import("../examples/vercel-cron-route.ts");
      // Fails closed: with no CRON_SECRET configured, nobody gets in (no header, an empty bearer, any bearer).
      for (const authorization of [undefined, "Bearer ", "Bearer undefined", "Bearer s3cret"]) {
        const closed = await GET(new Request("http://localhost/api/keyq", { headers: authorization ? { authorization } : {} }));
        assert.equal(closed.status, 503, `unset CRON_SECRET, authorization ${authorization}`);
      }
      process.env.CRON_SECRET = "s3cret";
      for (const authorization of [undefined, "Bearer nope", "Bearer s3cre", "Bearer s3crett", "s3cret"]) {
        const denied = await GET(new Request("http://localhost/api/keyq", { headers: authorization ? { authorization } : {} }));
        assert.equal(denied.status, 401, `authorization ${authorization}`);
      }
      // The refused calls consumed nothing: the authorised one below gets all 7 events.
      const res = await GET(new Request("http://localhost/api/keyq", { headers: { authorization: "Bearer s3cret" } }));
      assert.equal(res.status, 200);
      assert.match(res.headers.get("content-type") ?? "", /application\/json/);
      const body = await res.json() as { report: { events: number }; consumed: { id: string; type: string; key: string }[] };
      console.log(`GET /api/keyq → ${JSON.stringify(body)}`);
      assert.equal(body.report.events, 7);
      assert.deepEqual(body.consumed.map((c) => c.id).sort(), [...ids].sort());
      const again = await f.q.exclusive("jobs", "vercel-cron").run({ handler: () => assert.fail("nothing should be left") });
      assert.equal(again.events, 0);
    });
  });

  test("examples fail closed: the only one that serves requests is the Vercel route (tested above); the others serve none", async () => {
    const worker = (await import("../examples/cloudflare-worker/worker.ts")).default as Record<string, unknown>;
    assert.deepEqual(Object.keys(worker), ["scheduled"], "the Cloudflare Worker has a Cron Trigger and no fetch handler");
    for (const file of ["deno-cron.ts", "node-worker.ts", "bun-sql.ts", "tier-a-migrations.ts", "tier-b-lifecycle.ts", "demo.ts"]) {
      const text = readFileSync(new URL(`../examples/${file}`, import.meta.url), "utf8");
      assert.doesNotMatch(text, /Deno\.serve|Bun\.serve|createServer|\.listen\(|export async function (GET|POST)/, `${file} serves no endpoint`);
    }
  });
});
