/**
 * Proves the npm package works as published: `npm pack` (which builds), then
 * in a temporary project `npm install --offline` of the tarball (its one
 * dependency, valibot, packed from this repository's node_modules), then imports `keyq` and
 * every `keyq/<driver>` subpath of its `exports` map under Node ESM, Bun and
 * Deno, and type-checks the same imports with tsc (NodeNext and Bundler
 * resolution) and `deno check`. The driver subpaths must load without their
 * driver packages installed (adapters are typed structurally).
 *
 *   node --import tsx scripts/pack-check.ts [--keep]
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

const root = resolve(fileURLToPath(import.meta.url), "../..");
const bin = (name: string) => join(root, "node_modules/.bin", name);
const keep = process.argv.includes("--keep");
const work = mkdtempSync(join(tmpdir(), "keyq-pack-"));
const app = join(work, "app");
let failed = false;

/** Runs a command; prints its output when it fails. */
function run(cmd: string, args: string[], cwd: string, env: Record<string, string> = {}): string {
  try {
    return execFileSync(cmd, args, { cwd, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
  } catch (err) {
    const e = err as { stdout?: string; stderr?: string; message: string };
    throw new Error(`${cmd} ${args.join(" ")} failed in ${cwd}:\n${e.stdout ?? ""}${e.stderr ?? ""}`);
  }
}

function step(label: string, fn: () => string | void): void {
  const started = Date.now();
  try {
    const out = fn();
    console.log(`pack-check: ok   ${label}${out ? ` — ${out}` : ""} (${Date.now() - started} ms)`);
  } catch (err) {
    failed = true;
    console.error(`pack-check: FAIL ${label}\n${(err as Error).message}`);
  }
}

try {
  // 1. Pack (prepack builds dist/) and install the tarball offline.
  const packOut = run("npm", ["pack", "--json", "--pack-destination", work], root);
  const [packed] = JSON.parse(packOut.slice(packOut.search(/^\[/m))) as {
    filename: string;
    files: { path: string }[];
    size: number;
  }[];
  const tarball = join(work, packed!.filename);
  console.log(`pack-check: packed ${packed!.filename}: ${packed!.files.length} files, ${(packed!.size / 1024).toFixed(1)} kB`);
  const stray = packed!.files.map((f) => f.path).filter((p) =>
    !/^(dist\/|docs\/keyq\.svg$|docs\/README\.md$|README\.md$|CHANGELOG\.md$|LICENSE$|package\.json$)/.test(p)
  );
  if (stray.length) throw new Error(`unexpected files in the package: ${stray.join(", ")}`);

  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "keyq-pack-check", private: true, type: "module" }, null, 2));
  // keyq's one dependency, valibot, comes packed from this repository's node_modules, so the
  // install works offline even with an empty npm cache; npm still checks it against keyq's range.
  // @opentelemetry/api (dependency-free too) is keyq/otel's optional peer: installed, as a user of keyq/otel would.
  const packDep = (name: string): string => {
    const out = run("npm", ["pack", "--json", "--ignore-scripts", "--pack-destination", work, join(root, "node_modules", name)], root);
    return join(work, (JSON.parse(out.slice(out.search(/^\[/m))) as { filename: string }[])[0]!.filename);
  };
  run("npm", ["install", "--offline", "--no-audit", "--no-fund", "--ignore-scripts", tarball, packDep("valibot"), packDep("@opentelemetry/api")], app);

  // 2. The specifiers: the root and every subpath of the installed package's exports map.
  const pkg = JSON.parse(readFileSync(join(app, "node_modules/keyq/package.json"), "utf8")) as { exports: Record<string, unknown> };
  const specifiers = Object.keys(pkg.exports).map((sub) => `keyq${sub.slice(1)}`);
  const expected: Record<string, string[]> = {
    "keyq": ["keyq", "KeyqError", "latestVersion", "migrationSql"],
    "keyq/postgres-js": ["fromPostgresJs"],
    "keyq/pglite": ["fromPGlite"],
    "keyq/pg": ["fromPg"],
    "keyq/neon": ["fromNeonPool", "fromNeonClient", "fromNeonHttp"],
    "keyq/bun-sql": ["fromBunSql"],
    "keyq/otel": ["instrument", "toTraceparent", "fromTraceparent"],
  };
  for (const s of specifiers) if (!expected[s]) throw new Error(`exports has ${s}, which pack-check does not know: add it to "expected"`);

  // 3. Runtime imports: the same ESM file under node, bun and deno.
  const imports = specifiers.map((s, i) => `import * as m${i} from "${s}";`).join("\n");
  writeFileSync(
    join(app, "check.mjs"),
    `${imports}
const mods = { ${specifiers.map((s, i) => `"${s}": m${i}`).join(", ")} };
const expected = ${JSON.stringify(expected)};
for (const [spec, names] of Object.entries(expected)) {
  for (const name of names) {
    if (typeof mods[spec][name] === "undefined") throw new Error(spec + " does not export " + name);
  }
}
// The core runs on a fake driver: no database, no driver package.
const q = mods["keyq"].keyq({ name: "fake", query: async () => [] });
if (q.schema !== "keyq") throw new Error("keyq() did not build a client");
try { mods["keyq"].keyq({ name: "fake", query: async () => [] }, { schema: "bad schema" }); throw new Error("no error"); }
catch (e) { if (!(e instanceof mods["keyq"].KeyqError) || e.code !== "INVALID_IDENTIFIER") throw e; }
console.log(Object.keys(mods).length + " modules, latestVersion " + mods["keyq"].latestVersion);
`,
  );
  step("node ESM imports", () => run("node", ["check.mjs"], app).trim());
  step("keyq CLI (bin)", () => {
    const script = run("node", [join(app, "node_modules/.bin/keyq"), "sql", "--schema", "pack_check"], app);
    if (!script.includes(`create table "pack_check".queue`)) throw new Error("keyq sql did not print the engine");
    const version = run("node", [join(app, "node_modules/.bin/keyq"), "--version"], app).trim();
    const want = (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version: string }).version;
    if (version !== want) throw new Error(`keyq --version printed "${version}", package.json says ${want}`);
    // No driver is installed in this project: the CLI says which to install.
    let noDriver = "";
    try {
      run("node", [join(app, "node_modules/.bin/keyq"), "status"], app, { DATABASE_URL: "postgres://nobody@127.0.0.1:1/none" });
    } catch (err) {
      noDriver = (err as Error).message;
    }
    if (!noDriver.includes('No Postgres driver found: install one next to keyq ("npm install postgres" or "npm install pg")')) {
      throw new Error(`keyq status without a driver did not say what to install:\n${noDriver}`);
    }
    return `keyq sql: ${script.split("\n").length} lines; keyq --version: ${version}; without a driver: says what to install`;
  });
  step("bun imports", () => run(bin("bun"), ["check.mjs"], app).trim());
  step("deno imports (npm package in node_modules)", () => run(bin("deno"), ["run", "--allow-read", "--allow-env", "check.mjs"], app).trim());

  // 4. Types: every specifier resolves to declarations, and the real shapes line up.
  writeFileSync(
    join(app, "check.ts"),
    `import { keyq, KeyqError, type Driver, type Keyq, type KeyqBase, type KeyqEvent, type TxDriver } from "keyq";
import { fromPostgresJs, type PostgresJsLike } from "keyq/postgres-js";
import { fromPGlite, type PGliteLike } from "keyq/pglite";
import { fromPg, type PgPoolLike } from "keyq/pg";
import { fromNeonHttp, fromNeonPool, type NeonHttpLike } from "keyq/neon";
import { fromBunSql, type BunSqlLike } from "keyq/bun-sql";
declare const a: PostgresJsLike, b: PGliteLike, c: PgPoolLike, d: NeonHttpLike, e: BunSqlLike;
const drivers: TxDriver[] = [fromPostgresJs(a), fromPGlite(b), fromPg(c), fromNeonPool(c), fromBunSql(e)];
const http: Driver = fromNeonHttp(d);
const q: Keyq = keyq(drivers[0]!, { schema: "keyq" });
export const sendOnly: KeyqBase = keyq(http);
// @ts-expect-error a driver without transactions gives no consuming client (no migrate, no transaction)
export const consuming: Keyq = keyq(http);
export const handler = (ev: KeyqEvent<{ n: number }>): number => ev.payload.n;
export const code: KeyqError["code"] = "QUEUE_NOT_FOUND";
// @ts-expect-error send needs a type and a payload
export const bad = q.send("jobs", {});
`,
  );
  for (const resolution of ["NodeNext", "Bundler"]) {
    writeFileSync(
      join(app, `tsconfig.${resolution}.json`),
      JSON.stringify({
        compilerOptions: {
          target: "ES2022",
          lib: ["ES2023", "DOM"],
          module: resolution === "NodeNext" ? "NodeNext" : "ESNext",
          moduleResolution: resolution,
          types: [],
          strict: true,
          noEmit: true,
          // NodeNext also checks the installed declaration files themselves.
          skipLibCheck: resolution !== "NodeNext",
        },
        files: ["check.ts"],
      }),
    );
    step(`tsc types (moduleResolution ${resolution})`, () => void run(bin("tsc"), ["-p", `tsconfig.${resolution}.json`], app));
  }
  step("deno check types", () => void run(bin("deno"), ["check", "check.ts"], app));
} catch (err) {
  failed = true;
  console.error(`pack-check: FAIL ${(err as Error).message}`);
} finally {
  if (keep) console.log(`pack-check: kept ${work}`);
  else rmSync(work, { recursive: true, force: true });
}
if (failed) process.exit(1);
console.log("pack-check: the packed package resolves with types under Node, Bun and Deno");
