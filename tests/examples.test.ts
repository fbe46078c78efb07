// Runs every example in examples/ against the test database, each in a fresh
// schema (KEYQ_SCHEMA), as its header says to run it: the test subscribes the
// example's consumer, sends events, starts the example, and checks that it
// printed every event it consumed and left nothing behind. Each runtime's
// pass runs the examples written for it (Deno: deno-cron; Bun: bun-sql;
// Node: node-worker and the Cloudflare Worker inside workerd via miniflare);
// the Vercel route handler is a plain function, called in every runtime.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { dbSkip } from "./helpers/db.ts";
import { pgFixture } from "./helpers/keyq.ts";
import { runtimeName, setupNeon, teardownNeon } from "./helpers/drivers.ts";

const skip = await dbSkip();
const runtime = runtimeName();
const root = fileURLToPath(new URL("..", import.meta.url));
const only = (r: string): string | false => runtime !== r && `runs in the ${r} pass (npm run test:${r})`;

type Fx = Awaited<ReturnType<typeof pgFixture>>;

/** A fresh schema with the "jobs" queue, `consumer` subscribed, and `n` keyed events sent. */
async function seed(consumer: string, n: number): Promise<{ f: Fx; ids: string[] }> {
  const f = await pgFixture({ max: 2 });
  await f.q.createQueue("jobs");
  await f.q.exclusive("jobs", consumer).subscribe();
  const sent = await f.q.sendBatch("jobs", Array.from({ length: n }, (_, i) => ({ type: "Job", payload: { n: i }, key: `tenant-${i % 3}` })));
  return { f, ids: sent.map((s) => s.id) };
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
function start(cmd: string, args: string[], env: Record<string, string>): Spawned {
  const child = spawn(cmd, args, { cwd: root, env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout!.on("data", (d) => (out += String(d)));
  child.stderr!.on("data", (d) => (out += String(d)));
  const done = new Promise<{ code: number | null; out: string }>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, out }));
  });
  const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  done.finally(() => clearTimeout(timer)).catch(() => {});
  return { done, output: () => out, kill: (s) => child.kill(s) };
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
    const { f, ids } = await seed("deno-cron", 7);
    try {
      const { code, out } = await start(process.execPath, ["run", "--allow-net", "--allow-env", "examples/deno-cron.ts"], {
        DATABASE_URL: f.url,
        KEYQ_SCHEMA: f.schema,
        KEYQ_ONCE: "1",
      }).done;
      console.log(out.trim());
      assert.equal(code, 0, out);
      assert.match(out, /run: 7 events/);
      await consumedAll(f, "deno-cron", ids, out);
    } finally {
      await f.close();
    }
  });

  test("examples/bun-sql.ts: one run over Bun.SQL consumes the backlog", { skip: skip || only("bun") }, async () => {
    const { f, ids } = await seed("bun-sql", 7);
    try {
      const { code, out } = await start(process.execPath, ["examples/bun-sql.ts"], { DATABASE_URL: f.url, KEYQ_SCHEMA: f.schema }).done;
      console.log(out.trim());
      assert.equal(code, 0, out);
      assert.match(out, /run: 7 events/);
      await consumedAll(f, "bun-sql", ids, out);
    } finally {
      await f.close();
    }
  });

  test("examples/node-worker.ts: two workers share the backlog, then stop cleanly on SIGTERM and SIGINT", { skip: skip || only("node") }, async () => {
    const { f } = await seed("node-worker", 0);
    try {
      const env = { DATABASE_URL: f.url, KEYQ_SCHEMA: f.schema };
      const workers = ["a", "b"].map((w) => start(process.execPath, ["--import", "tsx", "examples/node-worker.ts"], { ...env, WORKER: w }));
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
    } finally {
      await f.close();
    }
  });

  test("examples/cloudflare-worker: scheduled() inside workerd (miniflare) consumes over cloudflare:sockets", { skip: skip || only("node") }, async () => {
    const { f, ids } = await seed("cf-cron", 7);
    try {
      const { code, out } = await start(process.execPath, ["--import", "tsx", "examples/cloudflare-worker/run.ts"], {
        DATABASE_URL: f.url,
        KEYQ_SCHEMA: f.schema,
      }).done;
      console.log(out.trim());
      assert.equal(code, 0, out);
      assert.match(out, /cron "\* \* \* \* \*": 7 events/);
      assert.match(out, /scheduled\(\) outcome: ok/);
      await consumedAll(f, "cf-cron", ids, out);
    } finally {
      await f.close();
    }
  });

  test("examples/vercel-cron-route.ts: GET runs once over a Neon Pool and returns the report; a wrong secret gets 401", { skip }, async () => {
    const { f, ids } = await seed("vercel-cron", 7);
    const saved = { ...process.env };
    await setupNeon();
    try {
      Object.assign(process.env, { DATABASE_URL: f.url, KEYQ_SCHEMA: f.schema, CRON_SECRET: "s3cret" });
      const { GET } = await import("../examples/vercel-cron-route.ts");
      const denied = await GET(new Request("http://localhost/api/keyq", { headers: { authorization: "Bearer nope" } }));
      assert.equal(denied.status, 401);
      const res = await GET(new Request("http://localhost/api/keyq", { headers: { authorization: "Bearer s3cret" } }));
      assert.equal(res.status, 200);
      assert.match(res.headers.get("content-type") ?? "", /application\/json/);
      const body = await res.json() as { report: { events: number }; consumed: { id: string; type: string; key: string }[] };
      console.log(`GET /api/keyq → ${JSON.stringify(body)}`);
      assert.equal(body.report.events, 7);
      assert.deepEqual(body.consumed.map((c) => c.id).sort(), [...ids].sort());
      const again = await f.q.exclusive("jobs", "vercel-cron").run({ handler: () => assert.fail("nothing should be left") });
      assert.equal(again.events, 0);
    } finally {
      for (const k of ["DATABASE_URL", "KEYQ_SCHEMA", "CRON_SECRET"]) {
        if (saved[k] === undefined) delete process.env[k];
        else process.env[k] = saved[k];
      }
      await teardownNeon();
      await f.close();
    }
  });
});
