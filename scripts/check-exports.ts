/**
 * Checks that the npm manifest (package.json), the JSR manifest (jsr.json) and
 * deno.json agree: the version everywhere is package.json's (scripts/version.ts:
 * also bin/version.ts, the generated module, the README), same subpath exports (npm points at built
 * files, "./dist/src/drivers/x.js" ↔ "./src/drivers/x.ts"), every export
 * target exists, every driver in src/drivers/ is exported, and deno.json
 * maps "keyq" and "keyq/<sub>" to the same sources (for Deno tests and doc checks).
 *
 *   node --import tsx scripts/check-exports.ts [--dist]
 *
 * `--dist` also requires the built files (after `npm run build`).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { versionProblems } from "./version.ts";

const root = resolve(fileURLToPath(import.meta.url), "../..");
const checkDist = process.argv.includes("--dist");
const problems: string[] = [];

type Json = Record<string, unknown>;
function readJson(file: string): Json {
  try {
    return JSON.parse(readFileSync(join(root, file), "utf8")) as Json;
  } catch (err) {
    console.error(`check-exports: cannot read ${file}: ${(err as Error).message}`);
    process.exit(1);
  }
}

const pkg = readJson("package.json");
const jsr = readJson("jsr.json");
const deno = readJson("deno.json");

/** "./dist/src/drivers/x.js" → "./src/drivers/x.ts"; "./dist/mod.d.ts" → "./mod.ts". */
function sourceOf(built: string): string | null {
  const m = /^\.\/dist\/(.+?)(\.d\.ts|\.js)$/.exec(built);
  return m ? `./${m[1]}.ts` : null;
}

// npm: { "./x": { "types": "./dist/….d.ts", "default": "./dist/….js" } } → source per subpath.
const npm = new Map<string, string>();
for (const [sub, target] of Object.entries((pkg.exports ?? {}) as Json)) {
  const t = target as { types?: unknown; default?: unknown } | string;
  if (typeof t !== "object" || typeof t.types !== "string" || typeof t.default !== "string") {
    problems.push(`package.json exports["${sub}"] must be { "types": "./dist/….d.ts", "default": "./dist/….js" }.`);
    continue;
  }
  const fromTypes = sourceOf(t.types);
  const fromJs = sourceOf(t.default);
  if (!fromTypes || !t.types.endsWith(".d.ts") || !fromJs || !t.default.endsWith(".js") || fromTypes !== fromJs) {
    problems.push(`package.json exports["${sub}"]: "${t.types}" and "${t.default}" must name one ./dist/ file as .d.ts and .js.`);
    continue;
  }
  npm.set(sub, fromJs);
  if (checkDist) {
    for (const f of [t.types, t.default]) {
      if (!existsSync(join(root, f))) problems.push(`package.json exports["${sub}"]: ${f} is missing (run npm run build).`);
    }
  }
}

function stringExports(file: string, manifest: Json): Map<string, string> {
  const out = new Map<string, string>();
  const exp = manifest.exports;
  if (typeof exp === "string") out.set(".", exp);
  else {
    for (const [sub, target] of Object.entries((exp ?? {}) as Json)) {
      if (typeof target === "string") out.set(sub, target);
      else problems.push(`${file} exports["${sub}"] must be a path string.`);
    }
  }
  for (const [sub, target] of out) {
    if (!existsSync(join(root, target))) problems.push(`${file} exports["${sub}"]: ${target} does not exist.`);
  }
  return out;
}

const jsrExports = stringExports("jsr.json", jsr);
const denoExports = stringExports("deno.json", deno);

function compare(aName: string, a: Map<string, string>, bName: string, b: Map<string, string>): void {
  for (const [sub, target] of a) {
    if (!b.has(sub)) problems.push(`"${sub}" is exported by ${aName} but not by ${bName}.`);
    else if (b.get(sub) !== target) {
      problems.push(`"${sub}": ${aName} points at ${target} but ${bName} at ${b.get(sub)}.`);
    }
  }
  for (const sub of b.keys()) if (!a.has(sub)) problems.push(`"${sub}" is exported by ${bName} but not by ${aName}.`);
}
compare("jsr.json", jsrExports, "package.json (as source)", npm);
compare("jsr.json", jsrExports, "deno.json", denoExports);

// deno.json maps "keyq" and "keyq/<sub>" to the sources, so examples and tests resolve them in Deno.
const denoImports = (deno.imports ?? {}) as Json;
for (const [sub, target] of jsrExports) {
  const name = `keyq${sub.slice(1)}`;
  if (denoImports[name] !== target) problems.push(`deno.json imports["${name}"] must be "${target}".`);
}
for (const name of Object.keys(denoImports)) {
  if ((name === "keyq" || name.startsWith("keyq/")) && !jsrExports.has(`.${name.slice(4)}`)) {
    problems.push(`deno.json imports["${name}"] names no export of jsr.json.`);
  }
}

// Every driver adapter in src/drivers/ must be a subpath export.
const driversDir = join(root, "src/drivers");
const drivers = existsSync(driversDir) ? readdirSync(driversDir).filter((f) => f.endsWith(".ts")) : [];
for (const file of drivers) {
  const target = `./src/drivers/${file}`;
  if (![...jsrExports.values()].includes(target)) {
    const sub = `./${file.slice(0, -3)}`;
    problems.push(
      `${target} is not exported: add "${sub}": "${target}" to jsr.json and deno.json exports, ` +
        `"keyq${sub.slice(1)}": "${target}" to deno.json imports, and ` +
        `"${sub}": { "types": "./dist/src/drivers/${file.slice(0, -3)}.d.ts", "default": "./dist/src/drivers/${file.slice(0, -3)}.js" } to package.json.`,
    );
  }
}

for (const [name, m] of [["jsr.json", jsr], ["deno.json", deno]] as const) {
  if (m.name !== jsr.name) problems.push(`${name} name ${m.name} differs from jsr.json ${jsr.name}.`);
}
// The version is package.json's; jsr.json, deno.json, bin/version.ts, the generated module and the README's tarball name copy it.
problems.push(...versionProblems(root));

// Built declaration files must import siblings as .js (Deno resolves npm:keyq types literally).
if (checkDist && existsSync(join(root, "dist"))) {
  for (const entry of readdirSync(join(root, "dist"), { recursive: true, withFileTypes: true })) {
    if (!entry.isFile() || !entry.name.endsWith(".d.ts")) continue;
    const file = join(entry.parentPath, entry.name);
    if (/(?:from|import)\s*\(?\s*["']\.{1,2}\/[^"']+\.ts["']/.test(readFileSync(file, "utf8"))) {
      problems.push(`${file.slice(root.length + 1)} imports a relative .ts file (run npm run build, which runs scripts/fix-dts.ts).`);
    }
  }
}

if (problems.length) {
  console.error(`check-exports: ${problems.length} problem${problems.length === 1 ? "" : "s"}:`);
  for (const p of problems) console.error(`  - ${p}`);
  process.exit(1);
}
console.log(
  `check-exports: ok — version ${pkg.version}, ${jsrExports.size} subpaths (${[...jsrExports.keys()].join(", ")})` +
    (checkDist ? ", built files present" : ""),
);
