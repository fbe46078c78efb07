// The version is written once (package.json): scripts/version.ts finds every
// copy that differs (jsr.json, deno.json, bin/version.ts, the generated
// module, a keyq-X.Y.Z.tgz in the README) and --write brings them in line.
import assert from "node:assert/strict";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { readStamp } from "../scripts/build-migrations.ts";
import { versionCopies, versionProblems } from "../scripts/version.ts";

const root = fileURLToPath(new URL("..", import.meta.url));

test("every copy of the version in the repository is package.json's", () => {
  assert.deepEqual(versionProblems(root), []);
  const files = versionCopies(root).map((c) => c.file);
  for (const f of ["jsr.json", "deno.json", "bin/version.ts", "src/generated/migrations.ts"]) assert.ok(files.includes(f), f);
});

test("a bumped package.json: each stale copy is reported, and --write rewrites them (the function set's serial stays)", () => {
  const dir = mkdtempSync(join(tmpdir(), "keyq-version-"));
  try {
    for (const f of ["package.json", "jsr.json", "deno.json", "README.md", "bin/version.ts", "src/sql", "src/generated/migrations.ts"]) {
      mkdirSync(join(dir, f, ".."), { recursive: true });
      cpSync(join(root, f), join(dir, f), { recursive: true });
    }
    const pkg = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { version: string };
    const old = pkg.version;
    writeFileSync(join(dir, "package.json"), JSON.stringify({ ...pkg, version: "9.8.7-rc.1" }, null, 2));
    writeFileSync(join(dir, "README.md"), `${readFileSync(join(dir, "README.md"), "utf8")}\nnpm install ./keyq-${old}.tgz\n`);
    const stale = versionProblems(dir);
    for (const f of ["jsr.json", "deno.json", "bin/version.ts", "README.md", "src/generated/migrations.ts"]) {
      assert.ok(stale.some((p) => p.startsWith(`${f} says version ${old}`)), `${f} is reported: ${stale.join("\n")}`);
    }
    const serial = readStamp(join(dir, "src/sql")).serial;
    for (const c of versionCopies(dir)) if (c.found !== c.want) c.write();
    assert.deepEqual(versionProblems(dir), []);
    assert.match(readFileSync(join(dir, "bin/version.ts"), "utf8"), /VERSION: string = "9\.8\.7-rc\.1"/);
    assert.match(readFileSync(join(dir, "src/generated/migrations.ts"), "utf8"), /functionsVersion: string = "9\.8\.7-rc\.1"/);
    assert.equal(JSON.parse(readFileSync(join(dir, "jsr.json"), "utf8")).version, "9.8.7-rc.1");
    assert.ok(!readFileSync(join(dir, "README.md"), "utf8").includes(`keyq-${old}.tgz`));
    assert.equal(readStamp(join(dir, "src/sql")).serial, serial, "a version bump is not a new function set");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
