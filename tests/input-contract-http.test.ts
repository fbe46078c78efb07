// The input contract, drivers without transactions: a refusal comes before
// any request (Neon HTTP through the local endpoint shim).
import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import { neon, neonConfig } from "@neondatabase/serverless";
import { keyq } from "../mod.ts";
import { fromNeonHttp } from "../src/drivers/neon.ts";
import { dbSkip } from "./helpers/db.ts";
import { count } from "./helpers/keyq.ts";
import { withPg } from "./helpers/fixture.ts";
import { configureNeonHttp, type NeonHttpShim, startNeonHttpShim } from "./helpers/neon-http-shim.ts";
import { refused } from "./helpers/refused.ts";

const skip = await dbSkip();

describe("refusal before any request: drivers without transactions", () => {
  let shim: NeonHttpShim | undefined;
  let restore: (() => void) | undefined;
  after(async () => {
    restore?.();
    await shim?.stop();
  });

  test("Neon HTTP (through the local endpoint shim) makes 0 requests before TRANSACTIONS_UNSUPPORTED", { skip }, async () => {
    shim = await startNeonHttpShim();
    restore = configureNeonHttp(neonConfig, shim.url);
    await withPg({ max: 1 }, async (f) => {
      await f.q.createQueue("files");
      const q = keyq(fromNeonHttp(neon(f.url) as never), { schema: f.schema });
      await q.send("files", { type: "ViaHttp", payload: 1 }); // producing works over HTTP
      const before = shim!.requests;
      assert.ok(before >= 1, "the shim answered the send");
      const c = q.consumer("files", "c");
      // @ts-expect-error the types give a client over a driver without transactions no consuming calls
      await refused(c.run({ handler: () => {} }), "TRANSACTIONS_UNSUPPORTED");
      // @ts-expect-error (JavaScript callers get the run-time refusal)
      await refused(c.batch({ handler: () => {} }), "TRANSACTIONS_UNSUPPORTED");
      // @ts-expect-error an ordered consumer's handle has no work()
      await refused(q.ordered("files", "o", { slots: 2 }).work({ handler: () => {} }), "TRANSACTIONS_UNSUPPORTED");
      assert.equal(shim!.requests - before, 0, "no request was made");
      assert.equal(await count(f, "consumer"), 0);
      assert.equal(await count(f, "tick"), 1, "no tick was written (only createQueue's first one)");
    });
  });
});
