/**
 * After `tsc -p tsconfig.build.json`: rewrites relative `.ts` specifiers in
 * dist/**\/*.d.ts to `.js`. `rewriteRelativeImportExtensions` rewrites the
 * emitted JavaScript but leaves declaration files importing "../driver.ts";
 * tsc copes, Deno (npm:keyq) does not find the module.
 *
 *   node --import tsx scripts/fix-dts.ts [distDir]
 */
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

const SPECIFIER = /((?:from|import)\s*\(?\s*["'])(\.{1,2}\/[^"']+)\.ts(["'])/g;

/** Rewrites `"./x.ts"` to `"./x.js"` in import/export specifiers of one declaration file's text. */
export function fixDts(text: string): string {
  return text.replace(SPECIFIER, "$1$2.js$3");
}

const dist = resolve(process.argv[2] ?? join(fileURLToPath(import.meta.url), "../../dist"));
let changed = 0;
for (const entry of readdirSync(dist, { recursive: true, withFileTypes: true })) {
  if (!entry.isFile() || !entry.name.endsWith(".d.ts")) continue;
  const file = join(entry.parentPath, entry.name);
  const text = readFileSync(file, "utf8");
  const fixed = fixDts(text);
  if (fixed !== text) {
    writeFileSync(file, fixed);
    changed++;
  }
}
console.log(`fix-dts: rewrote .ts specifiers in ${changed} declaration file${changed === 1 ? "" : "s"} under ${dist}`);
