// The conformance suite: the same cases against every driver adapter, under
// whichever runtime runs this file (Node via tsx, Deno, Bun):
// - drivers with interactive transactions: the single-connection cases
//   (basic + failures), and on pooled drivers the Tier A two-worker cases;
// - Neon HTTP (no interactive transactions): produce/inspect cases, and proof
//   that consuming is refused with TRANSACTIONS_UNSUPPORTED;
// - Bun.SQL runs under Bun only (skipped elsewhere, with the reason).
// Neon goes through local stand-ins of its WebSocket proxy and HTTP endpoint.
//
// The last test records the run in .conformance/<runtime>.json and checks
// this runtime's column of the driver matrix in docs/drivers.md against it; refresh
// that page with `npm run matrix` after running this file under all three
// runtimes (see scripts/matrix.ts).
import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { basicCases, type Case } from "./suites/basic.ts";
import { failureCases } from "./suites/failure.ts";
import { tierACases } from "./suites/tier-a.ts";
import { httpCases } from "./suites/http.ts";
import { dbSkip, requireDatabase } from "./helpers/db.ts";
import { withFixture } from "./helpers/fixture.ts";
import { closeShared, type DriverSpec, driverSpecs, fixtureFor, migrateCase, neonTraffic, runtimeName, runtimeVersion } from "./helpers/drivers.ts";
import { type CellResult, checkColumn, matrixRows, type RunResult } from "./helpers/matrix.ts";

const noDb = await dbSkip();
const url = noDb ? "" : await requireDatabase();
const runtime = runtimeName();
const result: RunResult = { runtime, version: runtimeVersion(), finishedAt: "", rows: matrixRows(), cells: {} };

/** The cases a driver must pass. */
function casesFor(spec: DriverSpec): Case[] {
  if (!spec.transactions) return httpCases;
  return [migrateCase, ...basicCases, ...failureCases, ...(spec.pooled ? tierACases : [])];
}

after(closeShared);

/** Runs one case on a fresh fixture of `spec`'s driver. */
async function runCase(spec: DriverSpec, c: Case): Promise<void> {
  const { max: _max, ...options } = c.options ?? {};
  await withFixture(() => fixtureFor(spec, url, options), (f) => c.run(f));
}

for (const spec of driverSpecs) {
  const cases = casesFor(spec);
  const skip = spec.skip || (spec.id !== "pglite" && noDb);
  const cell: CellResult = { planned: cases.length, passed: 0, failed: 0 };
  if (skip) cell.skipReason = skip;
  result.cells[spec.id] = cell;
  describe(`conformance: ${spec.label} (${spec.module}) on ${runtime}`, () => {
    for (const c of cases) {
      test(c.name, { skip }, async () => {
        try {
          await runCase(spec, c);
          cell.passed++;
        } catch (err) {
          cell.failed++;
          throw err;
        }
      });
    }
  });
}

test(`the Neon drivers really went through the local stand-ins (${runtime})`, { skip: noDb }, () => {
  const t = neonTraffic();
  assert.ok(t.wsConnections > 0, "WebSocket connections through the proxy");
  assert.ok(t.httpRequests > 0, "HTTP requests to the shim");
});

test(`the docs/drivers.md driver matrix agrees with this run (${runtime} column)`, { skip: noDb }, () => {
  result.finishedAt = new Date().toISOString();
  const root = fileURLToPath(new URL("..", import.meta.url));
  mkdirSync(`${root}/.conformance`, { recursive: true });
  writeFileSync(`${root}/.conformance/${runtime}.json`, `${JSON.stringify(result, null, 2)}\n`);
  const cells = Object.values(result.cells).filter((c) => !c.skipReason);
  const ran = cells.reduce((n, c) => n + c.passed + c.failed, 0);
  const planned = cells.reduce((n, c) => n + c.planned, 0);
  if (ran < planned) {
    console.log(`conformance: partial run (${ran} of ${planned} tests), docs/drivers.md matrix not checked`);
    return;
  }
  const problems = checkColumn(readFileSync(`${root}/docs/drivers.md`, "utf8"), result);
  assert.deepEqual(
    problems,
    [],
    `docs/drivers.md's driver matrix differs from this ${runtime} run. Run this file under Node, Deno and Bun, then \`npm run matrix\`:\n  ${
      problems.join("\n  ")
    }`,
  );
});
