// Transaction poolers: the conformance cases that need several connections
// (Tier A, Tier B, work()) plus the single-connection ones, through a real
// PgBouncer in transaction mode (pool size 4, a private port and ini) in
// front of the test database, with postgres.js (`prepare: false`) and a pg
// Pool. Skipped with a reason when pgbouncer is not installed (outside CI;
// .ci/run installs it).
import { after, describe, test } from "node:test";
import { basicCases, type Case } from "./helpers/basic-suite.ts";
import { failureCases } from "./helpers/failure-suite.ts";
import { tierACases } from "./helpers/tier-a-suite.ts";
import { tierBCases } from "./helpers/tier-b-suite.ts";
import { dbSkip, requireDatabase } from "./helpers/db.ts";
import { closeShared, fixtureFor, migrateCase, poolerSpecs, runtimeName } from "./helpers/drivers.ts";
import { pgBouncerBinary } from "./helpers/pgbouncer.ts";
import process from "node:process";

const noDb = await dbSkip();
const noBouncer = pgBouncerBinary() ? false : "pgbouncer is not installed (apt-get install -y pgbouncer; .ci/run does it)";
if (noBouncer && process.env.CI) throw new Error(`CI must not skip the pooler tests: ${noBouncer}`);
const skip = noDb || noBouncer;
const url = skip ? "" : await requireDatabase();

const cases: Case[] = [migrateCase, ...basicCases, ...failureCases, ...tierACases, ...tierBCases];

after(closeShared);

for (const spec of poolerSpecs) {
  describe(`pooler: ${spec.label} (transaction mode) on ${runtimeName()}`, () => {
    for (const c of cases) {
      test(c.name, { skip }, async () => {
        const { max: _max, ...options } = c.options ?? {};
        const f = await fixtureFor(spec, url, options);
        try {
          await c.run(f);
        } finally {
          await f.close();
        }
      });
    }
  });
}
