// The lifecycle surface without a database: how the hub composes observers,
// what one observed batch reports, and how a waker decides between listening
// and polling (fake drivers).
import assert from "node:assert/strict";
import { test } from "node:test";
import type { BatchSettings } from "../../src/batch/settings.ts";
import type { Driver } from "../../src/driver.ts";
import { observeBatch } from "../../src/observe/batches.ts";
import { hub, type LifecycleEvent, loggerObserver } from "../../src/observe/observer.ts";
import { pollWaker, type Waker, waker } from "../../src/observe/wake.ts";
import type { BatchReport, KeyqEvent } from "../../src/types.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A handler transaction that answers nothing (the observer never queries it). */
const fakeTx = { query: () => Promise.resolve([]), savepoint: <T>(fn: (sp: never) => Promise<T>) => fn(undefined as never) };

const report = (r: Partial<BatchReport> = {}): BatchReport => ({
  events: 0,
  retried: 0,
  deadLettered: 0,
  dropped: 0,
  deferred: 0,
  statements: 3,
  roundTrips: 3,
  busy: false,
  ...r,
});
const event = (id: string): KeyqEvent<never> => ({ id, type: "T", key: null, payload: undefined as never, time: new Date(0), retry: 0 });

test("hub: no observer, nothing wrapped; send hooks nest and store the trace; a throwing observer is ignored", async () => {
  const h = hub();
  assert.equal(h.active, false);
  const seen: string[] = [];
  h.add({
    on: () => {
      throw new Error("broken observer");
    },
  });
  const off = h.add({ on: (e) => seen.push(e.type), send: (_i, call) => call("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01") });
  h.add({ send: (_i, call) => call(null).then((r) => (seen.push("outer done"), r)) });
  assert.equal(h.active, true);
  const trace = await h.send({ queue: "q", count: 1, batch: false }, (t) => Promise.resolve(t));
  assert.equal(trace, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  h.emit({ type: "work.woken", queue: "q", consumer: "c" });
  assert.deepEqual(seen, ["outer done", "work.woken"]);
  off();
  h.emit({ type: "work.woken", queue: "q", consumer: "c" });
  assert.equal(seen.length, 2, "removed");
});

test("observeBatch: events of one batch share its object; a sync handler stays sync; failures and counts are reported", async () => {
  const h = hub();
  const events: LifecycleEvent[] = [];
  const order: string[] = [];
  h.add({ on: (e) => events.push(e), handle: (c, call) => (order.push(`in ${c.events[0]!.id}`), call()) });
  const s = { handler: (ev: KeyqEvent<never>) => void order.push(`handler ${ev.id}`) } as unknown as BatchSettings;
  const r = await observeBatch(h, { queue: "q", consumer: "c", kind: "plain" }, s, (s2) => {
    const out = s2.handler!(event("1"), fakeTx, {} as never);
    assert.equal(out, undefined, "no promise made for a sync handler");
    s2.handler!(event("2"), fakeTx, {} as never);
    return Promise.resolve(report({ events: 2, retried: 1, deadLettered: 1 }));
  });
  assert.equal(r.events, 2);
  assert.deepEqual(order, ["in 1", "handler 1", "in 2", "handler 2"]);
  assert.deepEqual(events.map((e) => e.type), [
    "batch.started",
    "handler.started",
    "handler.ended",
    "handler.started",
    "handler.ended",
    "batch.committed",
    "events.retried",
    "events.deadLettered",
  ]);
  const batches = new Set(events.map((e) => ("batch" in e ? e.batch : "call" in e ? e.call.batch : null)));
  assert.equal(batches.size, 1, "one BatchInfo object for the whole batch");

  events.length = 0;
  const failing = { handler: () => Promise.reject(new Error("nope")) } as unknown as BatchSettings;
  await assert.rejects(
    observeBatch(h, { queue: "q", consumer: "c", kind: "plain" }, failing, async (s2) => {
      await Promise.resolve(s2.handler!(event("3"), fakeTx, {} as never)).catch(() => {});
      throw new Error("rolled back");
    }),
    /rolled back/,
  );
  const ended = events.find((e) => e.type === "handler.ended") as Extract<LifecycleEvent, { type: "handler.ended" }>;
  assert.equal((ended.error as Error).message, "nope");
  assert.equal(events.at(-1)!.type, "batch.aborted");
});

test("loggerObserver: warnings for failures, dead letters and aborted batches", () => {
  const lines: string[] = [];
  const o = loggerObserver({ warn: (m) => lines.push(m) });
  const batch = { queue: "q", consumer: "c", kind: "plain" as const, startedAt: 0 };
  o.on!({ type: "events.deadLettered", batch, count: 2 });
  o.on!({ type: "batch.aborted", batch, error: new Error("lost"), ms: 1 });
  o.on!({ type: "events.retried", batch, count: 1 }); // info: not a warning
  assert.deepEqual(lines, ["keyq: 2 event(s) of q/c moved to the dead letters", "keyq: batch of q/c rolled back: lost"]);
});

/** A fake driver whose LISTEN hears what `query` notifies when `delivers` is true. */
function fakeDriver(delivers: boolean): Driver & { notify(payload: string): void } {
  const fns = new Set<(p: string) => void>();
  const d = {
    name: "fake",
    connections: 4,
    query: (_text: string, params?: readonly (string | null)[]) => {
      if (delivers && params) setTimeout(() => fns.forEach((f) => f(params[1]!)), 1);
      return Promise.resolve([]);
    },
    listen: (_channel: string, f: (p: string) => void) => {
      fns.add(f);
      return Promise.resolve(() => Promise.resolve(void fns.delete(f)));
    },
    notify: (p: string) => fns.forEach((f) => f(p)),
  };
  return d;
}

test("waker: the probe decides; a notification for the queue ends a wait, one for another queue does not", async () => {
  const modes: string[] = [];
  const d = fakeDriver(true);
  const w = waker(d, "keyq", "jobs", "c1", (m, why) => modes.push(`${m}: ${why}`), 200);
  assert.equal(await w.wait(50), false, "nothing heard");
  assert.equal(w.mode, "listen");
  assert.deepEqual(modes, ["listen: a probe notification arrived"]);
  setTimeout(() => d.notify("other-queue:sent:1"), 5);
  setTimeout(() => d.notify("jobs:sent:2"), 20);
  assert.equal(await w.wait(60_000), "sent", "woken by a producer's commit on its queue");
  assert.equal(await w.wait(10), false, "the worker called to tick for them has claimed them");
  d.notify("jobs:sent:3");
  assert.equal(await w.wait(60_000), "sent");
  w.ticking()(null, false); // a tick statement sent now covers them (whether or not it wrote a tick)
  assert.equal(await w.wait(10), false);
  d.notify("jobs:sent:2");
  assert.equal(await w.wait(10), false, "the same transaction heard again is not a new commit");
  d.notify("jobs:tick:5");
  assert.equal(await w.wait(60_000), "tick");
  d.notify("jobs:tick:6");
  w.running(); // a run starting reads the ticks heard so far
  assert.equal(await w.wait(10), false);
  d.notify("jobs"); // an older engine's payload, without a transaction id
  assert.equal(await w.wait(60_000), "sent");
  w.ticking()(null, false);
  await w.close();

  const silent: string[] = [];
  const p = waker(fakeDriver(false), "keyq", "jobs", "c1", (m, why) => silent.push(`${m}: ${why}`), 30);
  assert.equal(await p.wait(100), false);
  assert.equal(p.mode, "poll");
  assert.deepEqual(silent, ["poll: no notification arrived within 30 ms (a transaction pooler?)"]);
  await p.close();

  const none: string[] = [];
  const { listen: _l, notify: _n, ...plain } = fakeDriver(true);
  const q = waker(plain, "keyq", "jobs", "c1", (m, why) => none.push(`${m}: ${why}`));
  assert.equal(q.mode, "poll");
  assert.deepEqual(none, ["poll: the fake driver cannot LISTEN"]);
});

test("waker: the notification of a tick the worker's consumer wrote wakes none of its workers; another's does", async () => {
  const d = fakeDriver(true);
  const w = waker(d, "keyq", "jobs", "c1", () => {}, 200);
  await w.wait(30); // the probe
  assert.equal(w.mode, "listen");
  w.ticking()("7", false); // ticked 7 itself, before its notification arrived
  d.notify("jobs:tick:7");
  assert.equal(await w.wait(20), false, "its own tick's notification is not a reason to look again");
  d.notify("jobs:tick:9");
  assert.equal(await w.wait(60_000), "tick", "another session's tick wakes it");
  d.notify("jobs:tick:9");
  assert.equal(await w.wait(20), false, "a tick is read once");
  d.notify("jobs:tick"); // an engine that sends no id: still a tick
  assert.equal(await w.wait(60_000), "tick");
  d.notify("jobs:tickle");
  d.notify("jobs:sentinel");
  assert.equal(await w.wait(20), false, "another queue's name that starts alike is not this queue's");
  await w.close();
});

/** Wakers of `channel` on `d`, one per [queue, consumer], once their probes arrived (listening). */
async function listening(d: Driver, channel: string, ...members: [queue: string, consumer: string][]) {
  const ws = members.map(([queue, consumer]) => waker(d, channel, queue, consumer, () => {}, 200));
  await Promise.all(ws.map((w) => w.wait(30))); // the probes
  return ws as [Waker, Waker, Waker];
}

test("herd: one notification wakes one worker; a tick wakes one worker of each consumer; more() wakes the next", async () => {
  const d = fakeDriver(true);
  const [a1, a2, b1] = await listening(d, "herd", ["jobs", "a"], ["jobs", "a"], ["jobs", "b"]);
  const woke: string[] = [];
  const watch = (name: string, w: Waker, ms = 60) => w.wait(ms).then((h) => void (h && woke.push(`${name}:${h}`)));
  // Three listeners hear each commit; one worker of the queue is woken to tick.
  let waits = [watch("a1", a1), watch("a2", a2), watch("b1", b1)];
  d.notify("jobs:sent:100");
  await Promise.all(waits);
  assert.equal(woke.length, 1, `one wake-up for one commit: ${woke.join(", ")}`);
  assert.match(woke[0]!, /:sent$/);
  // It ticks: the other consumer's idle worker is woken at once; its own consumer's are not.
  woke.length = 0;
  waits = [watch("a2", a2), watch("b1", b1)];
  a1.ticking()("41", false);
  d.notify("jobs:tick:41"); // the tick's notification, heard by every listener, wakes nobody more
  await Promise.all(waits);
  assert.deepEqual(woke, ["b1:tick"]);
  // Another session's tick: one worker of each consumer.
  woke.length = 0;
  waits = [watch("a1", a1), watch("a2", a2), watch("b1", b1)];
  d.notify("jobs:tick:42");
  await Promise.all(waits);
  assert.equal(woke.filter((x) => x.startsWith("a")).length, 1, woke.join(", "));
  assert.equal(woke.filter((x) => x.startsWith("b")).length, 1, woke.join(", "));
  // A batch that received events lets one more worker of its consumer look.
  woke.length = 0;
  waits = [watch("a2", a2), watch("b1", b1)];
  a1.more();
  await Promise.all(waits);
  assert.deepEqual(woke, ["a2:more"]);
  // A commit heard while no worker waits is taken by the next one to wait, once a tick has not covered it.
  d.notify("jobs:sent:101");
  assert.equal(await b1.wait(10), "sent");
  b1.ticking()(null, false);
  assert.equal(await a1.wait(10), false, "covered by b1's tick statement");
  // A tick statement that found another session writing a tick covers nothing: the next worker to wait ticks again.
  d.notify("jobs:sent:102");
  assert.equal(await a2.wait(10), "sent");
  a2.ticking()(null, true);
  assert.equal(await b1.wait(10), "sent", "still uncovered after a busy tick");
  b1.ticking()("43", false);
  assert.equal(await a1.wait(10), "tick", "b1's tick calls the other consumer's idle worker");
  assert.equal(await a2.wait(10), false);
  await Promise.all([a1.close(), a2.close(), b1.close()]);
});

test("herd: while a batch holds all of its consumer's work, commits wake none of its workers; its end wakes one", async () => {
  const d = fakeDriver(true);
  const [a1, a2, b1] = await listening(d, "cover", ["jobs", "a"], ["jobs", "a"], ["jobs", "b"]);
  // a1's batch holds every slot of consumer a: a commit wakes b1 (to tick for its own consumer), not a2.
  let release = a1.cover();
  let woke: string[] = [];
  const watch = (name: string, w: Waker, ms = 60) => w.wait(ms).then((h) => void (h && woke.push(`${name}:${h}`)));
  let waits = [watch("a2", a2), watch("b1", b1)];
  d.notify("jobs:sent:200");
  await Promise.all(waits);
  assert.deepEqual(woke, ["b1:sent"]);
  // b1's tick would wake an idle worker of a to read it: a2 would find every slot held.
  b1.ticking()("50", false);
  assert.equal(await a2.wait(20), false, "the tick waits for the holder");
  // Consumer a alone: a commit wakes none of its workers, and a2 does not take it when it waits.
  await b1.close();
  woke = [];
  d.notify("jobs:sent:201");
  assert.equal(await a2.wait(20), false, "a2 would find every slot held");
  // The batch ends: the commit still uncovered wakes a2, once; the tick stays for the holder.
  waits = [watch("a2", a2)];
  await sleep(5);
  release();
  release(); // once
  await Promise.all(waits);
  assert.deepEqual(woke, ["a2:sent"]);
  a2.ticking()("51", false);
  assert.equal(await a1.wait(10), "tick", "the holder, waiting again, reads the tick that came while it held every slot");
  assert.equal(await a2.wait(10), false, "covered by a2's tick, and the tick was taken");
  // A batch that turns out to hold only part of the work (not drained) lets an idle worker read a tick at once.
  release = a1.cover();
  d.notify("jobs:tick:52");
  assert.equal(await a2.wait(10), false);
  woke = [];
  waits = [watch("a2", a2)];
  await sleep(5);
  release(true);
  await Promise.all(waits);
  assert.deepEqual(woke, ["a2:tick"]);
  // A holder whose work() stopped before its batch ended will not look again: its end wakes an idle worker for the tick.
  release = a1.cover();
  d.notify("jobs:tick:53");
  await a1.close();
  woke = [];
  waits = [watch("a2", a2)];
  await sleep(5);
  release();
  await Promise.all(waits);
  assert.deepEqual(woke, ["a2:tick"]);
  // Without a hold, a commit wakes an idle worker of a at once.
  woke = [];
  waits = [watch("a2", a2)];
  d.notify("jobs:sent:202");
  await Promise.all(waits);
  assert.deepEqual(woke, ["a2:sent"]);
  assert.equal(typeof pollWaker().cover(), "function");
  await a2.close();
});

test("herd: the epoch counts each tick of the queue once, heard or written, and nothing else", async () => {
  const d = fakeDriver(true);
  const [a, b, other] = await listening(d, "epoch", ["jobs", "a"], ["jobs", "b"], ["mail", "a"]);
  const e0 = a.epoch();
  assert.equal(b.epoch(), e0, "one count per queue, whatever the consumer");
  a.ticking()("7", false); // written by a worker of this process
  assert.equal(a.epoch(), e0 + 1);
  d.notify("jobs:tick:7"); // its own notification, heard after the reply
  await a.wait(10);
  assert.equal(a.epoch(), e0 + 1, "a tick is counted once");
  d.notify("jobs:tick:8"); // another session's
  await b.wait(10);
  assert.equal(b.epoch(), e0 + 2);
  d.notify("jobs:sent:300"); // a producer's commit is no tick
  a.more();
  a.ticking()(null, true); // a busy tick statement wrote nothing
  await b.wait(10);
  assert.equal(a.epoch(), e0 + 2);
  assert.equal(other.epoch(), 0, "another queue's epoch is its own");
  assert.equal(pollWaker().epoch(), 0);
  await Promise.all([a.close(), b.close(), other.close()]);
});
