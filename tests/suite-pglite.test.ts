// The single-connection suite on embedded PGlite (Postgres in WASM).
import { after, describe, test } from "node:test";
import { basicCases } from "./helpers/basic-suite.ts";
import { failureCases } from "./helpers/failure-suite.ts";
import { closePGlite, pgliteFixture } from "./helpers/keyq.ts";

describe("basic suite on PGlite", () => {
  after(closePGlite);
  for (const c of [...basicCases, ...failureCases]) {
    test(c.name, async () => {
      const f = await pgliteFixture(c.options ?? {});
      try {
        await c.run(f);
      } finally {
        await f.close();
      }
    });
  }
});
