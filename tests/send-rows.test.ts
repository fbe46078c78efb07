// sendBatch on the wire (issue 24, build 5): one statement per batch, one
// array per field and the payloads as JSON text sent once; ids answered as
// runs that stay exact when other sessions draw ids at the same time or past
// 2^53; text of any kind round-trips; the dedup claim is set-based (its
// function calls do not grow with the batch); send_batch for SQL callers
// answers as before.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { type Executor, type Keyq, keyq, KeyqError } from "../mod.ts";
import { fromPostgresJs } from "../src/drivers/postgres-js.ts";
import { dbSkip } from "./helpers/db.ts";
import { withPg } from "./helpers/fixture.ts";

const skip = await dbSkip();

const refused = (code: string) => (e: unknown) => e instanceof KeyqError && e.code === code;

describe("sendBatch on the wire", () => {
  test("one statement per batch; each payload travels once as JSON text; values only as bind parameters", { skip }, async () => {
    await withPg({ max: 1 }, async (f) => {
      await f.q.createQueue("jobs");
      const seen: { text: string; params: readonly unknown[] }[] = [];
      const d = fromPostgresJs(f.sql);
      const q = keyq({ ...d, query: (text, params) => (seen.push({ text, params: params ?? [] }), d.query(text, params)) }, { schema: f.schema });
      const events = Array.from({ length: 1000 }, (_, i) => ({ type: "Made", key: `k${i % 7}`, payload: { i, name: `n-${i}`, tags: ["a", "b"] } }));
      const docs = events.map((e) => JSON.stringify(e.payload));
      for (const dedup of [false, true]) {
        seen.length = 0;
        const out = await q.sendBatch("jobs", events.map((e, i) => (dedup ? { ...e, dedupKey: `d${i}` } : e)));
        assert.equal(out.length, 1000);
        assert.equal(seen.length, 1, `one statement for a batch of 1,000 (dedup: ${dedup})`);
        const { text, params } = seen[0]!;
        assert.doesNotMatch(text, /n-1\b|Made|k0/, "no value in the statement text");
        assert.ok(params.includes(docs.join("\n")), "the payloads as one text, each once, with no wrapper per event");
      }
      const [n] = await f.raw(`select count(*)::int as n, count(distinct ev_data->>'name')::int as names from "${f.schema}".event`);
      assert.deepEqual(n, { n: 2000, names: 1000 });
    });
  });

  test("4 connections send at once: every id answered names its own event, in each sender's order", { skip }, async () => {
    await withPg({ max: 4 }, async (f) => {
      await f.q.createQueue("jobs");
      const sent = await Promise.all([0, 1, 2, 3].map(async (w) => {
        const out = [];
        for (let b = 0; b < 5; b++) {
          const events = Array.from({ length: 300 }, (_, i) => ({ type: "E", key: `w${w}`, payload: { w, b, i } }));
          out.push(...(await f.q.sendBatch("jobs", events)).map((r, i) => ({ ...r, w, b, i })));
        }
        return out;
      }));
      const all = sent.flat();
      assert.equal(new Set(all.map((r) => r.id)).size, 6000, "6,000 distinct ids");
      const rows = await f.raw(`select ev_id::text as id, ev_data from "${f.schema}".event`);
      const byId = new Map(rows.map((r) => [r.id as string, r.ev_data]));
      for (const r of all) assert.deepEqual(byId.get(r.id), { w: r.w, b: r.b, i: r.i }, `id ${r.id}`);
      for (const out of sent) {
        const ids = out.map((r) => BigInt(r.id));
        assert.ok(ids.every((id, i) => i === 0 || id > ids[i - 1]!), "one sender's ids grow in send order");
      }
    });
  });

  test("ids past 2^53, in one run or several, are answered exactly", { skip }, async () => {
    await withPg({ max: 1 }, async (f) => {
      await f.q.createQueue("jobs");
      const [s] = await f.raw(`select event_seq::text as seq from "${f.schema}".queue`);
      await f.raw(`select setval($1::regclass, 9007199254740990)`, [s!.seq as string]);
      const out = await f.q.sendBatch("jobs", Array.from({ length: 5 }, (_, i) => ({ type: "E", payload: i })));
      assert.deepEqual(out.map((r) => r.id), ["9007199254740991", "9007199254740992", "9007199254740993", "9007199254740994", "9007199254740995"]);
      // Ids that are not one run (as when other sessions draw in between): each answered in place.
      await f.raw(`alter sequence ${s!.seq as string} increment by 2`);
      const more = await f.q.sendBatch("jobs", Array.from({ length: 3 }, (_, i) => ({ type: "E", payload: 5 + i })));
      assert.deepEqual(more.map((r) => r.id), ["9007199254740997", "9007199254740999", "9007199254741001"]);
      const rows = await f.raw(`select ev_id::text as id, ev_data from "${f.schema}".event order by ev_id`);
      assert.deepEqual(rows.map((r) => [r.id, r.ev_data]), [...out, ...more].map((r, i) => [r.id, i]));
    });
  });

  test("types, keys and payload text of any kind round-trip; text Postgres cannot store is refused before anything is written", { skip }, async () => {
    await withPg({ max: 1 }, async (f) => {
      await f.q.createQueue("jobs");
      const odd = ["NULL", "", 'a"b', "c\\d", "{e,f}", "g\nh", " sp ", "é😀", "\\u0000", "null"];
      const events = odd.map((k, i) => ({ type: `T${k}`, key: i === 1 ? null : k, payload: { k, s: `x${k}` } }));
      await f.q.sendBatch("jobs", events);
      const rows = await f.raw(`select ev_type, ev_key, ev_data from "${f.schema}".event order by ev_id`);
      assert.deepEqual(rows, events.map((e) => ({ ev_type: e.type, ev_key: e.key, ev_data: e.payload })));
      const before = rows.length;
      for (const bad of ["a\u0000b", "x\ud800y", "\udc00"]) {
        // Event 0 holds a backslash and "ud800" as text: JSON-escaped, it looks like a bad escape, and is fine.
        const batch: { type: string; payload: unknown }[] = [{ type: "ok", payload: { fine: "\\ud800" } }, {
          type: "E",
          payload: { list: [1, { [bad.length > 1 ? "v" : bad]: bad }] },
        }];
        await assert.rejects(
          f.q.sendBatch("jobs", batch),
          (e: unknown) => refused("INVALID_PAYLOAD")(e) && /event 1/.test((e as Error).message) && /payload\.list\[1\]/.test((e as Error).message),
        );
        await assert.rejects(f.q.sendBatch("jobs", [{ type: "E", payload: 1, key: bad }]), refused("INVALID_INPUT"));
      }
      const [n] = await f.raw(`select count(*)::int as n from "${f.schema}".event`);
      assert.equal(n!.n, before, "nothing written");
      await f.q.sendBatch("jobs", [{ type: "ok", payload: { fine: "\\ud800", nul: "\\u0000" } }]);
      const [last] = await f.raw(`select ev_data from "${f.schema}".event order by ev_id desc limit 1`);
      assert.deepEqual(last!.ev_data, { fine: "\\ud800", nul: "\\u0000" }, "stored as given");
    });
  });
});

describe("dedup batches are set-based", () => {
  /**
   * Calls of the engine's functions while `fn` runs, in one transaction (the
   * session's counts not yet flushed to the statistics include earlier
   * transactions': the difference is taken).
   */
  async function calls(f: { q: Keyq; schema: string }, fn: (tx: Executor) => Promise<unknown>): Promise<Record<string, number>> {
    return await f.q.transaction(async (tx) => {
      await tx.query("set local track_functions = 'pl'");
      const read = async () =>
        new Map(
          (await tx.query(
            `select p.proname as name, coalesce(pg_stat_get_xact_function_calls(p.oid), 0)::int as n from pg_proc p
              where p.pronamespace = $1::text::regnamespace`,
            [`"${f.schema}"`],
          )).map((r) => [r.name as string, r.n as number]),
        );
      const before = await read();
      await fn(tx);
      const after = await read();
      return Object.fromEntries([...after].map(([k, n]) => [k, n - (before.get(k) ?? 0)]).filter(([, n]) => (n as number) > 0));
    });
  }

  test("claiming 100 or 5,000 keys takes the same function calls: no call per key, no claim_dedup", { skip }, async () => {
    await withPg({ max: 2 }, async (f) => {
      await f.q.createQueue("jobs");
      await f.q.sendBatch("jobs", Array.from({ length: 50 }, (_, i) => ({ type: "live", payload: i, dedupKey: `k${i}` })));
      const seen: Record<string, number>[] = [];
      for (const n of [100, 5000]) {
        // Every key twice in the batch, the first 50 held by live claims.
        const events = Array.from({ length: n }, (_, i) => ({ type: "E", payload: i, dedupKey: `k${i % (n / 2)}` }));
        seen.push(await calls(f, (tx) => f.q.sendBatch("jobs", events, { tx })));
        const fresh = events.map((_, i) => ({ type: "F", payload: i, dedupKey: `fresh-${n}-${i}` }));
        seen.push(await calls(f, (tx) => f.q.sendBatch("jobs", fresh, { tx })));
      }
      assert.deepEqual(seen[0], seen[2], "duplicates and live keys: the same calls for 100 and 5,000 events");
      assert.deepEqual(seen[1], seen[3], "fresh keys: the same calls for 100 and 5,000 events");
      assert.equal(seen[2]!.append_rows, 1);
      assert.equal(seen[2]!.claim_dedup, undefined, "no claim per key");
      assert.equal(seen[2]!.resolve_claims, 1, "duplicates are resolved in one call");
      assert.equal(seen[3]!.resolve_claims, undefined, "distinct fresh keys need no resolving");
      const [c] = await f.raw(`select count(*)::int as n from "${f.schema}".event`);
      assert.equal(c!.n, 50 + 0 + 100 + (2500 - 50) + 5000, "one event per new key: none for live keys, one per fresh key");
    });
  });

  test("send_batch for SQL callers answers as before; send_rows refuses arrays of different lengths before writing", { skip }, async () => {
    await withPg({ max: 1 }, async (f) => {
      await f.q.createQueue("jobs");
      const s = `"${f.schema}"`;
      const [plain] = await f.raw(`select ${s}.send_batch('jobs', $1::text::jsonb)::text as r`, [
        JSON.stringify([{ type: "a", payload: 1 }, { type: "b", key: "k", payload: null }]),
      ]);
      const ids = JSON.parse(plain!.r as string) as string[];
      assert.ok(ids.length === 2 && ids.every((id) => typeof id === "string") && BigInt(ids[1]!) === BigInt(ids[0]!) + 1n, String(plain!.r));
      const batch = [{ type: "c", payload: 2, dedupKey: "x" }, { type: "d", payload: 3 }, { type: "e", payload: 4, dedupKey: "x", ttl: 60 }];
      const [deduped] = await f.raw(`select ${s}.send_batch('jobs', $1::text::jsonb)::text as r`, [JSON.stringify(batch)]);
      const r = JSON.parse(deduped!.r as string) as { id: string; deduped: boolean }[];
      assert.deepEqual(r.map((x) => x.deduped), [false, false, true]);
      assert.equal(r[2]!.id, r[0]!.id);
      const [rows] = await f.raw(`select ${s}.send_rows('jobs', '{a,b}', '{NULL,k}', $1, '{y,y}')::text as r`, ['{"p":1}\n[2]']);
      const sent = JSON.parse(rows!.r as string) as { ids: [string, number][]; dup: [number, string][] };
      assert.equal(sent.ids.length, 1);
      assert.equal(sent.ids[0]![1], 2, "two ids drawn, one run");
      assert.deepEqual(sent.dup, [[1, sent.ids[0]![0]]], "the second event is answered with the first one's id");
      const [stored] = await f.raw(`select ev_type, ev_key, ev_data from "${f.schema}".event where ev_id = $1::text::bigint`, [sent.ids[0]![0]]);
      assert.deepEqual(stored, { ev_type: "a", ev_key: null, ev_data: { p: 1 } }, "an unquoted NULL is a null key");
      await assert.rejects(f.raw(`select ${s}.send_rows('jobs', '{a,b}', '{k,NULL}', $1)`, ['{"p":1}']), (e: { code?: string }) => e.code === "22023");
      const [n] = await f.raw(`select count(*)::int as n from "${f.schema}".event`);
      assert.equal(n!.n, 5, "2 + 2 + 1 events: the duplicates and the refused call wrote none");
    });
  });
});
