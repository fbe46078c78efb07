// The reply and dispatch path without a database: a plain or ordered batch
// comes as wire rows whose payloads are JSON text, parsed only when a
// handler reads `event.payload` (once), and validated before the handler
// when the queue has a payload schema or a typed event map.
import assert from "node:assert/strict";
import { afterEach, describe, test } from "node:test";
import { inspect } from "node:util";
import * as v from "valibot";
import { keyq } from "../../mod.ts";
import type { Executor, TxDriver } from "../../src/driver.ts";
import type { KeyqEvent } from "../../src/types.ts";

const TIME = "2026-01-01T00:00:00.5+00:00";

/** Wire rows [id, txid, type, key, time, payload text, trace]. */
function rows(payloads: string[]): unknown[] {
  return payloads.map((p, i) => [String(i + 1), "7", "T", `k${i}`, TIME, p, null]);
}

/** A reply in the row form: a row per event (its head, a newline, its payload) and the head, first (plain) or last (ordered). */
function lines(reply: Record<string, unknown>, headLast: boolean): { r: string }[] {
  const { rows: all, ...head } = reply as { rows: unknown[][] };
  const events = all.map((r) => `${JSON.stringify([...r.slice(0, 5), r[6]])}\n${r[5]}`);
  return (headLast ? [...events, JSON.stringify(head)] : [JSON.stringify(head), ...events]).map((r) => ({ r }));
}

/**
 * A driver whose receive answers `reply` (then an empty batch), whose ack
 * records the outcome, and every other call a neutral answer.
 */
function fake(reply: Record<string, unknown>): TxDriver & { acks: unknown[] } {
  const acks: unknown[] = [];
  let given = false;
  const exec: Executor = {
    query(text, params) {
      if (text.includes(".receive_plain_rows(") || text.includes(".receive_ordered_rows(")) {
        const empty = { busy: false, retries: [], rows: [], ...("slot" in reply ? { slot: null } : {}) };
        const r = given ? empty : reply;
        given = true;
        return Promise.resolve(lines(r, text.includes(".receive_ordered_rows(")));
      }
      if (text.includes(".ack(")) {
        acks.push(JSON.parse(params![3]!));
        return Promise.resolve([{ r: '{"retried":0,"deadLettered":0,"deferred":0}' }]);
      }
      return Promise.resolve([{ r: '{"created":false,"tick":null}' }]);
    },
  };
  return { name: "fake", acks, ...exec, transaction: (fn) => fn(exec) } as TxDriver & { acks: unknown[] };
}

/** Counts JSON.parse calls on one text (the payload's), restored after each test. */
const realParse = JSON.parse;
function countParses(text: string): { n: number } {
  const count = { n: 0 };
  JSON.parse = ((s: string, reviver?: (k: string, v: unknown) => unknown) => {
    if (s === text) count.n++;
    return realParse(s, reviver);
  }) as typeof JSON.parse;
  return count;
}
afterEach(() => {
  JSON.parse = realParse;
});

describe("lazy payloads", () => {
  test("a handler that never reads the payload parses none (a broken one does not fail it)", async () => {
    const d = fake({ busy: false, retries: [], rows: rows(["{not json", '{"a":1}']) });
    const seen: string[] = [];
    const r = await keyq(d).consumer("jobs", "c").batch({ handler: (ev) => void seen.push(`${ev.id}:${ev.key}`) });
    assert.equal(r.events, 2);
    assert.deepEqual(seen, ["1:k0", "2:k1"]);
    assert.deepEqual(d.acks, [], "nothing failed: no ack statement");
  });

  test("a handler that reads it parses it: the broken one fails, the other is handled", async () => {
    const d = fake({ busy: false, retries: [], rows: rows(["{not json", '{"a":1}']) });
    const got: unknown[] = [];
    await keyq(d).consumer("jobs", "c").batch({ handler: (ev) => void got.push(ev.payload) });
    assert.deepEqual(got, [{ a: 1 }]);
    const [ack] = d.acks as { failed: { id: string }[] }[];
    assert.deepEqual(ack!.failed.map((f) => f.id), ["1"], "reading the broken payload failed its event");
  });

  test("read twice, parsed once; time made on first read; JSON.stringify sees every field", async () => {
    const text = '{"n":1,"deep":{"x":[1,2]}}';
    const d = fake({ busy: false, retries: [], rows: rows([text]) });
    const parses = countParses(text);
    let ev!: KeyqEvent;
    await keyq(d).consumer("jobs", "c").batch({
      handler: (e) => {
        ev = e;
        assert.equal(parses.n, 0, "nothing parsed before the handler reads");
        const a = e.payload;
        const b = e.payload;
        assert.equal(a, b, "the same parsed object");
        assert.equal(e.time, e.time, "the same Date");
      },
    });
    assert.equal(parses.n, 1);
    assert.equal(ev.time.toISOString(), "2026-01-01T00:00:00.500Z");
    assert.deepEqual(JSON.parse(JSON.stringify(ev)), {
      id: "1",
      type: "T",
      key: "k0",
      payload: { n: 1, deep: { x: [1, 2] } },
      time: "2026-01-01T00:00:00.500Z",
      retry: 0,
    });
    const shown = inspect(ev, { depth: 5 });
    assert.match(shown, /deep/, `a logged event shows its payload: ${shown}`);
    assert.match(shown, /2026-01-01T00:00:00\.500Z/, `a logged event shows its time: ${shown}`);
    ev.payload = "replaced" as never;
    assert.equal(ev.payload, "replaced", "assigning the payload replaces it");
  });

  test("an ordered batch's events carry their slot and parse lazily too", async () => {
    const text = '{"o":2}';
    const d = fake({ busy: false, slot: 3, retries: [], rows: rows([text, text]) });
    const parses = countParses(text);
    const slots: (number | undefined)[] = [];
    const r = await keyq(d).ordered("jobs", "o", { slots: 4 }).batch({ handler: (ev) => void slots.push(ev.slot) });
    assert.equal(r.events, 2);
    assert.deepEqual(slots, [3, 3]);
    assert.equal(parses.n, 0, "no-op handlers: no payload parsed");
  });

  test("a payload schema validates before the handler (the parse happens there)", async () => {
    const text = '{"n":"not a number"}';
    const d = fake({ busy: false, retries: [], rows: rows([text, '{"n":5}']) });
    const q = keyq(d, { payloads: { jobs: v.object({ n: v.number() }) } });
    const got: unknown[] = [];
    await q.consumer("jobs", "c").batch({ handler: (ev) => void got.push(ev.payload) });
    assert.deepEqual(got, [{ n: 5 }], "the refused payload never reached the handler");
    const [ack] = d.acks as { failed: { id: string; error: { code?: string } }[] }[];
    assert.deepEqual(ack!.failed.map((f) => [f.id, f.error.code]), [["1", "INVALID_PAYLOAD"]]);
  });

  test("a typed event map validates before the handler", async () => {
    const d = fake({ busy: false, retries: [], rows: rows(['{"n":"x"}', '{"n":5}']) });
    const q = keyq(d, { events: { jobs: { T: v.object({ n: v.number() }) } } });
    const got: unknown[] = [];
    await q.consumer("jobs", "c").batch({ on: { T: (ev) => void got.push(ev.payload) } });
    assert.deepEqual(got, [{ n: 5 }]);
    const [ack] = d.acks as { failed: { id: string; error: { code?: string } }[] }[];
    assert.deepEqual(ack!.failed.map((f) => [f.id, f.error.code]), [["1", "INVALID_PAYLOAD"]]);
  });
});
