/**
 * `npm test`: the suite under every runtime, each one run even when an
 * earlier one failed, then a summary, and a non-zero exit when any failed.
 * Order: Deno, Bun, the extra Node versions (scripts/node-versions.ts), and
 * this machine's node last, so the log ends with Node's `# pass` / `# fail`
 * lines. An extra Node version that is not installed is a notice locally and
 * a failure when CI is set.
 *
 *   node --import tsx scripts/test.ts [test files…]   # default: every tests/*.test.ts and tests/unit/*.test.ts
 */
import { spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import { delimiter, dirname, join, resolve } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { installedNode, NODE_VERSIONS } from "./node-versions.ts";

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
}

/** The closing counts of a runner's output, in one line. */
export function counts(out: string): string {
  // deno-lint-ignore no-control-regex -- strips ANSI colour codes
  const plain = out.replace(/\x1b\[[0-9;]*m/g, "");
  const node = /^(?:#|ℹ) pass (\d+)$[\s\S]*?^(?:#|ℹ) fail (\d+)$/m.exec(plain);
  if (node) {
    const skipped = /^(?:#|ℹ) skipped (\d+)$/m.exec(plain)?.[1] ?? "0";
    return `${node[1]} passed, ${node[2]} failed, ${skipped} skipped`;
  }
  const deno = /(?:ok|FAILED) \| \d+ passed.*\| \d+ failed.*$/m.exec(plain);
  if (deno) return deno[0];
  const bun = /^\s*(\d+) pass$[\s\S]*?^\s*(\d+) fail$/m.exec(plain);
  if (bun) return `${bun[1]} passed, ${bun[2]} failed, ${/^\s*(\d+) skip$/m.exec(plain)?.[1] ?? 0} skipped`;
  return "no test counts found";
}

function execute(run: Run): Promise<Result> {
  console.log(`\n=== ${run.label}: ${[run.cmd, ...run.args].join(" ").replace(root + "/", "")}\n`);
  return new Promise((done) => {
    const child = spawn(run.cmd, run.args, { cwd: root, env: { ...process.env, ...run.env }, stdio: ["ignore", "pipe", "pipe"] });
    let tail = "";
    const keep = (d: Buffer) => void (tail = (tail + String(d)).slice(-20_000));
    child.stdout.on("data", (d: Buffer) => (process.stdout.write(d), keep(d)));
    child.stderr.on("data", (d: Buffer) => (process.stderr.write(d), keep(d)));
    child.on("error", (err) => done({ label: run.label, code: 127, counts: err.message }));
    child.on("close", (code) => done({ label: run.label, code: code ?? 1, counts: counts(tail) }));
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

const results: Result[] = [];
const notices: string[] = [];
results.push(await execute({ label: "Deno", cmd: bin("deno"), args: ["test", "--allow-all", ...(given.length ? files : ["tests/"])] }));
results.push(await execute({ label: "Bun", cmd: bin("bun"), args: ["test", "--timeout", "120000", ...(given.length ? files : ["tests/"])] }));
for (const version of NODE_VERSIONS) {
  const node = installedNode(version);
  if (node) results.push(await execute(nodeRun(`Node ${version}`, node)));
  else if (ci) results.push({ label: `Node ${version}`, code: 1, counts: "NOT INSTALLED (CI must run it: node --import tsx scripts/node-versions.ts --install)" });
  else notices.push(`Node ${version}: not installed, skipped (npm run setup:node installs it)`);
}
const own = `Node ${process.versions.node} (this machine's node)`;
console.log(`\n=== summary before the last run\n${[...results.map((r) => `${r.code === 0 ? "ok  " : "FAIL"} ${r.label}: ${r.counts}`), ...notices.map((n) => `note ${n}`), `next ${own}`].join("\n")}`);
const last = await execute(nodeRun(own, process.execPath));
results.push(last);
process.exitCode = results.some((r) => r.code !== 0) ? 1 : 0;
