// Typed event maps at run time (issue 21): send refuses unknown types and
// bad payloads before writing; handlers get parsed payloads; `on:` dispatches
// per type; an event of a type the map does not know (sent by another client,
// an older or newer deploy) fails with UNKNOWN_EVENT_TYPE and ends in the
// dead letters with that code. The compile-time half is tests/types/events.types.ts.
import assert from "node:assert/strict";
import { test } from "node:test";
import * as v from "valibot";
import { keyq, type KeyqEvent } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { dbSkip } from "./helpers/db.ts";
import { type PgFixture, withPg } from "./helpers/fixture.ts";
import { refused } from "./helpers/refused.ts";

const skip = await dbSkip();

const files = {
  FileCreated: v.object({ path: v.string(), size: v.number() }),
  FileDeleted: v.object({ path: v.string() }),
  // Input and output differ: send may leave out the tag, handlers always get one.
  FileTagged: v.object({ path: v.string(), tag: v.optional(v.string(), "none") }),
};

/** A typed client on the fixture's schema, with the queue created. */
async function typed(f: PgFixture, settings = { maxRetries: 0 }) {
  const q = keyq(fromPostgresJs(f.sql), { schema: f.schema, events: { files } });
  await q.createQueue("files", settings);
  return q;
}

test("send refuses an unknown type and a payload its type's schema refuses, before writing", { skip }, () =>
  withPg(async (f) => {
    const q = await typed(f);
    const before = (await q.status({ queue: "files" }))[0]!.eventsSinceTick;
    const e1 = await refused(q.send("files", { type: "FileCreatd", payload: { path: "/a", size: 1 } } as never), "UNKNOWN_EVENT_TYPE");
    assert.match(e1.message, /"FileCreatd", not one of queue "files"'s event types \(FileCreated, FileDeleted, FileTagged\); did you mean "FileCreated"\?/);
    assert.deepEqual(e1.details.known, ["FileCreated", "FileDeleted", "FileTagged"]);
    const e2 = await refused(q.send("files", { type: "FileCreated", payload: { path: "/a" } } as never), "INVALID_PAYLOAD");
    assert.match(e2.message, /payload\.size/);
    await refused(q.sendBatch("files", [{ type: "FileDeleted", payload: { path: "/a" } }, { type: "Nope", payload: {} }] as never), "UNKNOWN_EVENT_TYPE");
    assert.equal((await q.status({ queue: "files" }))[0]!.eventsSinceTick, before, "nothing was written");
    // The valid events go through, one by one and in a batch.
    await q.send("files", { type: "FileCreated", payload: { path: "/a", size: 1 }, key: "t" });
    const ids = await q.sendBatch("files", [{ type: "FileDeleted", payload: { path: "/a" } }, { type: "FileTagged", payload: { path: "/a" } }]);
    assert.equal(ids.length, 2);
  }));

test("handlers get parsed payloads; on: dispatches per type; an unknown type is dead-lettered with UNKNOWN_EVENT_TYPE", { skip }, () =>
  withPg(async (f) => {
    const q = await typed(f);
    const c = q.consumer("files", "audit");
    await c.subscribe();
    // Another client (untyped, or an older deploy) writes a type this map does not know.
    const other = keyq(fromPostgresJs(f.sql), { schema: f.schema });
    await q.send("files", { type: "FileCreated", payload: { path: "/a", size: 3 }, key: "t" });
    await other.send("files", { type: "FileMoved", payload: { from: "/a", to: "/b" }, key: "t" });
    await q.send("files", { type: "FileTagged", payload: { path: "/a" }, key: "t" });
    await other.send("files", { type: "FileDeleted", payload: { path: 7 }, key: "t" }); // a payload its schema refuses
    await q.send("files", { type: "FileDeleted", payload: { path: "/a" }, key: "t" });
    const seen: string[] = [];
    const errors: string[] = [];
    const r = await c.run({
      on: {
        FileCreated: (ev) => void seen.push(`created ${ev.payload.path} ${ev.payload.size}`),
        FileDeleted: (ev) => void seen.push(`deleted ${ev.payload.path}`),
        FileTagged: (ev) => void seen.push(`tagged ${ev.payload.tag.toUpperCase()}`),
      },
      onError: (err, ev: KeyqEvent) => void errors.push(`${ev.type} ${(err as { code?: string }).code}`),
    });
    // A failure reruns the batch with savepoints, calling the handlers before it again (documented): compare distinct calls.
    assert.deepEqual([...new Set(seen)], ["created /a 3", "tagged NONE", "deleted /a"]);
    assert.deepEqual([...new Set(errors)], ["FileMoved UNKNOWN_EVENT_TYPE", "FileDeleted INVALID_PAYLOAD"]);
    assert.equal(r.deadLettered, 2);
    const dead = await q.dlq.list({ queue: "files" });
    assert.deepEqual(dead.map((d) => [d.type, d.error?.code]).sort(), [["FileDeleted", "INVALID_PAYLOAD"], ["FileMoved", "UNKNOWN_EVENT_TYPE"]]);
  }));

test("an unknown type is retried by the queue's policy first (a newer worker may know it)", { skip }, () =>
  withPg(async (f) => {
    const q = await typed(f, { maxRetries: 1, retryBase: "1h" } as never);
    const c = q.exclusive("files", "x");
    await c.subscribe();
    await keyq(fromPostgresJs(f.sql), { schema: f.schema }).send("files", { type: "FileMoved", payload: {}, key: "k" });
    const r = await c.run({ handler: () => assert.fail("no handler call for an unknown type") });
    assert.deepEqual([r.retried, r.deadLettered], [1, 0]);
  }));

test("handleBatch gets the known events with parsed payloads; fail() takes them back", { skip }, () =>
  withPg(async (f) => {
    const q = await typed(f);
    const c = q.consumer("files", "all");
    await c.subscribe();
    await q.send("files", { type: "FileTagged", payload: { path: "/t" } });
    await keyq(fromPostgresJs(f.sql), { schema: f.schema }).send("files", { type: "Unknown", payload: null });
    await q.send("files", { type: "FileDeleted", payload: { path: "/d" } });
    const got: string[] = [];
    const r = await c.run({
      handleBatch: (events, { fail }) => {
        for (const ev of events) {
          got.push(ev.type);
          if (ev.type === "FileTagged") assert.equal(ev.payload.tag, "none");
          if (ev.type === "FileDeleted") fail(ev, new Error("refused by the handler"));
        }
      },
    });
    assert.deepEqual([...new Set(got)], ["FileTagged", "FileDeleted"]);
    assert.equal(r.deadLettered, 2, "the unknown type and the failed one");
  }));

test("on: refuses a second handler, a type the queue lacks, a non-function; works on untyped queues", { skip }, () =>
  withPg(async (f) => {
    const q = await typed(f);
    const c = q.consumer("files", "c");
    const all = { FileCreated() {}, FileDeleted() {}, FileTagged() {} };
    assert.match((await refused(c.run({ on: all, handler: () => {} } as never), "INVALID_INPUT")).message, /exactly one of "handler", "handleBatch" or "on"/);
    assert.match(
      (await refused(c.run({ on: { ...all, FileMovd() {} } } as never), "INVALID_INPUT")).message,
      /"FileMovd" is not an event type of queue "files"/,
    );
    await refused(c.run({ on: { ...all, FileCreated: 1 } } as never), "INVALID_INPUT");
    await refused(c.run({ on: null } as never), "INVALID_INPUT");
    // Untyped: on: dispatches by type, a type without an entry fails (UNKNOWN_EVENT_TYPE).
    const plain = keyq(fromPostgresJs(f.sql), { schema: f.schema });
    await plain.createQueue("jobs", { maxRetries: 0 });
    const u = plain.consumer("jobs", "u");
    await u.subscribe();
    await plain.sendBatch("jobs", [{ type: "A", payload: 1 }, { type: "B", payload: 2 }]);
    const seen: unknown[] = [];
    const r = await u.run({ on: { A: (ev: KeyqEvent) => void seen.push(ev.payload) } } as never);
    assert.deepEqual([[...new Set(seen)], r.deadLettered], [[1], 1]);
    assert.equal((await plain.dlq.list({ queue: "jobs" }))[0]!.error?.code, "UNKNOWN_EVENT_TYPE");
  }));

test("keyq() refuses a queue in both payloads and events, and a non-schema event type", () => {
  const driver = { name: "fake", query: () => Promise.resolve([]) };
  assert.throws(() => keyq(driver, { payloads: { files: files.FileDeleted }, events: { files } }), /both "payloads" and "events"/);
  assert.throws(() => keyq(driver, { events: { files: { FileCreated: {} as never } } }), /Standard Schema/);
});
