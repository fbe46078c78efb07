// The single-connection suite on real Postgres through postgres.js.
import { describe, test } from "node:test";
import { basicCases } from "./helpers/basic-suite.ts";
import { failureCases } from "./helpers/failure-suite.ts";
import { dbSkip } from "./helpers/db.ts";
import { pgFixture } from "./helpers/keyq.ts";

const skip = await dbSkip();

describe("basic suite on Postgres (postgres.js)", () => {
  for (const c of [...basicCases, ...failureCases]) {
    test(c.name, { skip }, async () => {
      const f = await pgFixture(c.options ?? {});
      try {
        await c.run(f);
      } finally {
        await f.close();
      }
    });
  }
});
