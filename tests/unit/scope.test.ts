// The cleanup helper every database test relies on (tests/helpers/scope.ts).
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { scoped } from "../helpers/scope.ts";

describe("scoped cleanups", () => {
  test("cleanups run after the body, last first, and the body's value comes back", async () => {
    const log: string[] = [];
    const out = await scoped((defer) => {
      defer(() => void log.push("drop schema"));
      const client = defer.use({ name: "client" }, (c) => Promise.resolve(void log.push(`close ${c.name}`)));
      log.push(`body uses ${client.name}`);
      return Promise.resolve(42);
    });
    assert.equal(out, 42);
    assert.deepEqual(log, ["body uses client", "close client", "drop schema"]);
  });

  test("a throwing body still runs every cleanup, and its error wins over a cleanup's", async () => {
    const log: string[] = [];
    await assert.rejects(
      scoped((defer) => {
        defer(() => void log.push("first"));
        defer(() => {
          throw new Error("cleanup broke");
        });
        defer(() => void log.push("last"));
        throw new Error("body broke");
      }),
      /body broke/,
    );
    assert.deepEqual(log, ["last", "first"]);
  });

  test("a failing cleanup after a passing body fails, after the other cleanups ran", async () => {
    const log: string[] = [];
    await assert.rejects(
      scoped((defer) => {
        defer(() => void log.push("ran"));
        defer(() => Promise.reject(new Error("leak")));
      }),
      /leak/,
    );
    assert.deepEqual(log, ["ran"]);
    await assert.rejects(
      scoped((defer) => {
        defer(() => Promise.reject(new Error("a")));
        defer(() => Promise.reject(new Error("b")));
      }),
      (e) => e instanceof AggregateError && e.errors.length === 2,
    );
  });

  test("cleanups registered inside a cleanup-free body that awaits still run in order", async () => {
    const log: number[] = [];
    await scoped(async (defer) => {
      for (let i = 0; i < 3; i++) {
        await new Promise((r) => setTimeout(r, 1));
        defer(() => void log.push(i));
      }
    });
    assert.deepEqual(log, [2, 1, 0]);
  });
});
