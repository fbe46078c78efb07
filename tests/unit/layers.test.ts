// The layering docs/architecture.md describes, checked against the real
// imports of src/: each folder (and each top-level file) may import only the
// layers listed for it, and no file imports upwards. A new folder must be
// added to the table (and to the page). No database.
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, normalize, relative } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const src = fileURLToPath(new URL("../../src", import.meta.url));

/** The bottom: top-level files that import at most each other. */
const base = ["driver.ts", "errors.ts", "error-text.ts", "faults.ts", "payload.ts", "text.ts", "types.ts", "validate.ts"];

/** What each layer may import, besides itself. */
export const allowed: Record<string, string[]> = {
  base: [],
  generated: [],
  drivers: ["driver.ts", "errors.ts", "faults.ts"],
  engine: ["base", "generated"],
  batch: ["base", "engine"],
  ops: ["base", "engine"],
  produce: ["base", "engine"],
  roles: ["base", "engine"],
  observe: ["base", "batch"],
  kinds: ["base", "engine", "batch", "ops", "observe"],
  orm: ["base"],
  events: ["base", "kinds"],
  "client.ts": ["base", "engine", "batch", "ops", "produce", "roles", "kinds", "events", "orm", "observe"],
};

/** The layer of a path relative to src/: its folder, `base` for the bottom files, or its own name. */
function layerOf(path: string): string {
  const [first, second] = path.split("/");
  if (second !== undefined) return first!;
  return base.includes(first!) ? "base" : first!;
}

function files(dir: string): string[] {
  return readdirSync(dir).flatMap((n) => {
    const full = join(dir, n);
    return statSync(full).isDirectory() ? files(full) : n.endsWith(".ts") ? [full] : [];
  });
}

test("src/: every import stays in its layer or goes down (docs/architecture.md)", () => {
  const problems: string[] = [];
  let edges = 0;
  for (const file of files(src)) {
    const from = relative(src, file);
    const layer = layerOf(from);
    assert.ok(layer in allowed, `${from}: layer "${layer}" is not in the table of tests/unit/layers.test.ts nor in docs/architecture.md`);
    const text = readFileSync(file, "utf8");
    for (const m of text.matchAll(/^(?:import|export)\s[^;]*?\sfrom\s+"(\.{1,2}\/[^"]+)";/gm)) {
      const to = relative(src, normalize(join(file, "..", m[1]!)));
      const target = layerOf(to);
      edges++;
      if (target === layer) continue;
      const ok = allowed[layer]!.some((a) => a === target || a === to);
      if (!ok) problems.push(`${from} imports ${to} (${layer} → ${target})`);
    }
  }
  assert.ok(edges > 50, `found ${edges} imports`);
  assert.deepEqual(problems, []);
});

test("scripts/ never import tests/: what scripts and tests share lives in scripts/lib", () => {
  const root = fileURLToPath(new URL("../..", import.meta.url));
  const tests = join(root, "tests");
  const problems: string[] = [];
  let edges = 0;
  for (const file of files(join(root, "scripts"))) {
    for (const m of readFileSync(file, "utf8").matchAll(/^(?:import|export)\s[^;]*?\sfrom\s+"(\.{1,2}\/[^"]+)";/gm)) {
      edges++;
      const to = normalize(join(file, "..", m[1]!));
      if (!relative(tests, to).startsWith("..")) problems.push(`${relative(root, file)} imports ${relative(root, to)}`);
    }
  }
  assert.ok(edges >= 8, `found ${edges} imports`);
  assert.deepEqual(problems, []);
});
