// examples/tier-b-lifecycle.ts: its cron handler applies every tenant's
// lifecycle in order across three static workers, exactly once.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { handler } from "../examples/tier-b-lifecycle.ts";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";

const skip = await dbSkip();

describe("examples/tier-b-lifecycle.ts", () => {
  test("three cron indexes apply create → overwrite → delete per tenant, in order, once", { skip }, async () => {
    await withPg(async (f) => {
      await f.q.createQueue("files");
      await f.raw(`create table "${f.schema}".file_state (tenant text, path text, size int, version int, primary key (tenant, path))`);
      await f.q.ordered("files", "file-state", { slots: 8 }).subscribe();
      const tenants = Array.from({ length: 12 }, (_, i) => `tenant-${i}`);
      await f.q.sendBatch<{ path: string; size?: number }>(
        "files",
        tenants.flatMap((key) => [
          { type: "FileCreated", key, payload: { path: "/a", size: 1 } },
          { type: "FileCreated", key, payload: { path: "/b", size: 2 } },
          { type: "FileOverwritten", key, payload: { path: "/a", size: 3 } },
          { type: "FileDeleted", key, payload: { path: "/b" } },
          { type: "FileOverwritten", key, payload: { path: "/a", size: 4 } },
        ]),
      );
      let events = 0;
      for (const index of [0, 1, 2]) events += (await handler(f.q, index, 3)).events;
      assert.equal(events, 60);
      const rows = await f.raw(`select tenant, path, size, version from "${f.schema}".file_state order by tenant`);
      assert.equal(rows.length, 12, "every tenant's /b was deleted after it was created");
      for (const r of rows) assert.deepEqual([r.path, r.size, r.version], ["/a", 4, 3], `in order for ${r.tenant}`);
    });
  });
});
