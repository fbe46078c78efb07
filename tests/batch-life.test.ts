// The batch's life on every driver of the registry (tests/helpers/drivers.ts):
// swallowed failures, tx.savepoint, one handler call per delivery, and the
// budget bounding a batch of run(); the cases are tests/suites/batches.ts.
import { after, describe, test } from "node:test";
import { batchCases } from "./suites/batches.ts";
import { dbSkip, requireDatabase } from "./helpers/db.ts";
import { withFixture } from "./helpers/fixture.ts";
import { closeShared, driverSpecs, fixtureFor, runtimeName } from "./helpers/drivers.ts";

const noDb = await dbSkip();
const url = noDb ? "" : await requireDatabase();

after(closeShared);

for (const spec of driverSpecs.filter((d) => d.transactions)) {
  const skip = spec.skip || (spec.id !== "pglite" && noDb);
  describe(`batch life: ${spec.label} on ${runtimeName()}`, () => {
    for (const c of batchCases(spec.pooled)) {
      test(c.name, { skip }, () => withFixture(() => fixtureFor(spec, url), (f) => c.run(f)));
    }
  });
}
