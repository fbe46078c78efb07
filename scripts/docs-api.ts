/**
 * `npm run docs:api`: the API reference as HTML in docs/api/, from the JSDoc
 * of mod.ts and the driver entries, with `deno doc` (offline). Not committed
 * (docs/api/ is ignored); CI builds it to prove it builds.
 *
 * deno doc is run in a scratch folder holding a copy of mod.ts and src/ and
 * a node_modules with valibot only (the sources' one dependency): Deno also
 * loads @types/node from a project's node_modules, and when node_modules is
 * a symlink to another folder (a git worktree sharing one install) it prints
 * ~60 "Failed resolving types" warnings for @types/node's triple-slash
 * references; with a plain `npm ci` install it prints none. The scratch
 * folder gives the same result either way. Any warning fails this script.
 *
 *   npm run docs:api                 # writes docs/api/index.html
 *   npm run docs:api -- --lint       # deno doc --lint over the same entries (no HTML)
 */
import { spawnSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

const root = resolve(fileURLToPath(import.meta.url), "../..");
const deno = join(root, "node_modules", ".bin", process.platform === "win32" ? "deno.cmd" : "deno");
const entries = ["mod.ts", "src/drivers/postgres-js.ts", "src/drivers/pg.ts", "src/drivers/neon.ts", "src/drivers/pglite.ts", "src/drivers/bun-sql.ts"];
const lint = process.argv.includes("--lint");

const scratch = mkdtempSync(join(tmpdir(), "keyq-docs-api-"));
try {
  for (const f of ["mod.ts", "src", "deno.json", "package.json"]) cpSync(join(root, f), join(scratch, f), { recursive: true });
  mkdirSync(join(scratch, "node_modules"));
  symlinkSync(join(root, "node_modules", "valibot"), join(scratch, "node_modules", "valibot"), "dir");
  const out = join(root, "docs", "api");
  if (!lint) rmSync(out, { recursive: true, force: true });
  const args = lint ? ["doc", "--lint", ...entries] : ["doc", "--html", "--name=keyq", `--output=${out}`, ...entries];
  const r = spawnSync(deno, args, { cwd: scratch, encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } });
  const text = `${r.stdout}${r.stderr}`;
  process.stdout.write(text);
  if (r.status !== 0) process.exit(r.status ?? 1);
  if (/warning/i.test(text)) {
    console.error("docs:api: deno doc printed warnings (above): fix the JSDoc or the types they name.");
    process.exit(1);
  }
  if (!lint) console.log(`docs:api: ${out}/index.html`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
