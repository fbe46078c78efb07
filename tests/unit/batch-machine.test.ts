// The batch's state machine (src/batch/machine.ts): every transition of the
// attempt, every admission and settling of an event, and the deadline rule.
import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { KeyqError } from "../../mod.ts";
import { admit, BUDGET_GRACE_MS, deadline, endsBatch, isFinal, move, type Phase, settle, type Step, swallowedError } from "../../src/batch/machine.ts";
import { batchSettings } from "../../src/batch/settings.ts";

const aborted = new KeyqError("BATCH_ABORTED", "x");
const steps: Step[] = [
  { on: "received", busy: false },
  { on: "received", busy: true },
  { on: "handled" },
  { on: "recorded" },
  { on: "committed" },
  { on: "aborted", error: aborted },
  { on: "failed", error: new Error("x") },
];
const phases: Phase[] = ["receiving", "handling", "recording", "committing", "committed", "busy", "aborted", "failed"];
const label = (s: Step) => (s.on === "received" ? `received${s.busy ? "(busy)" : ""}` : s.on);

/** The whole table: phase × step → next phase, or null when the step does not apply. */
const table: Record<Phase, Record<string, Phase | null>> = {
  receiving: { received: "handling", "received(busy)": "busy", handled: null, recorded: null, committed: null, aborted: "aborted", failed: "failed" },
  handling: { received: null, "received(busy)": null, handled: "recording", recorded: null, committed: null, aborted: "aborted", failed: "failed" },
  recording: { received: null, "received(busy)": null, handled: null, recorded: "committing", committed: null, aborted: "aborted", failed: "failed" },
  committing: { received: null, "received(busy)": null, handled: null, recorded: null, committed: "committed", aborted: "aborted", failed: "failed" },
  committed: { received: null, "received(busy)": null, handled: null, recorded: null, committed: null, aborted: null, failed: null },
  busy: { received: null, "received(busy)": null, handled: null, recorded: null, committed: null, aborted: null, failed: null },
  aborted: { received: null, "received(busy)": null, handled: null, recorded: null, committed: null, aborted: null, failed: null },
  failed: { received: null, "received(busy)": null, handled: null, recorded: null, committed: null, aborted: null, failed: null },
};

describe("batch machine: the attempt", () => {
  for (const from of phases) {
    for (const step of steps) {
      const want = table[from][label(step)];
      test(`${from} --${label(step)}--> ${want ?? "(refused)"}`, () => {
        const m = move(from, step);
        if (want === null) {
          assert.equal(m.ok, false);
          assert.ok(!m.ok && m.reason.length > 0, "a refused step says why");
        } else assert.deepEqual(m, { ok: true, phase: want });
      });
    }
  }

  test("the happy path runs receive → handle → record → commit; the final phases are final", () => {
    let p: Phase = "receiving";
    for (const s of [steps[0]!, steps[2]!, steps[3]!, steps[4]!]) {
      const m = move(p, s);
      assert.ok(m.ok);
      p = m.phase;
    }
    assert.equal(p, "committed");
    assert.deepEqual(phases.filter(isFinal), ["committed", "busy", "aborted", "failed"]);
  });
});

describe("batch machine: an event", () => {
  test("admission: held behind a failed key only when the policy holds; released once the batch ended; else run", () => {
    assert.equal(admit({ hold: true, keyFailed: true, ended: false }), "held");
    assert.equal(admit({ hold: true, keyFailed: true, ended: true }), "held");
    assert.equal(admit({ hold: false, keyFailed: true, ended: false }), "run");
    assert.equal(admit({ hold: true, keyFailed: false, ended: true }), "released");
    assert.equal(admit({ hold: false, keyFailed: false, ended: true }), "released");
    assert.equal(admit({ hold: false, keyFailed: false, ended: false }), "run");
  });

  test("settling: ok, failed, released on a stop, timed out, and a swallowed failure", () => {
    const boom = new Error("boom");
    const dup = Object.assign(new Error("duplicate key value"), { code: "23505" });
    assert.deepEqual(settle({}, undefined, false), { kind: "ok" });
    assert.deepEqual(settle({ error: boom }, undefined, false), { kind: "failed", error: boom });
    assert.deepEqual(settle({ error: boom }, undefined, true), { kind: "released" });
    assert.deepEqual(settle({ error: boom, timedOut: true }, undefined, true), { kind: "timedOut", error: boom });
    // The handler's own error wins over a statement it swallowed.
    assert.deepEqual(settle({ error: boom }, { error: dup }, false), { kind: "failed", error: boom });
    const s = settle({}, { error: dup }, false);
    assert.equal(s.kind, "failed");
    const e = (s as { error: unknown }).error;
    assert.ok(e instanceof KeyqError && e.code === "HANDLER_SWALLOWED_FAILURE");
    assert.equal(e.cause, dup);
    // A swallowed failure fails the event even when the worker is stopping: its writes are gone.
    assert.equal(settle({}, { error: dup }, true).kind, "failed");
  });

  test("only a timed-out event ends the batch", () => {
    assert.equal(endsBatch({ kind: "timedOut", error: 1 }), true);
    for (const o of [{ kind: "ok" }, { kind: "failed", error: 1 }, { kind: "released" }] as const) assert.equal(endsBatch(o), false);
  });

  test("the swallowed-failure error names the swallowed error and points to tx.savepoint", () => {
    const e = swallowedError(Object.assign(new Error('duplicate key value violates unique constraint "t_pkey"'), { code: "23505" }));
    assert.match(e.message, /23505: duplicate key value/);
    assert.match(e.message, /tx\.savepoint/);
    assert.deepEqual(e.details.swallowed, { message: 'duplicate key value violates unique constraint "t_pkey"', code: "23505", name: "Error" });
    assert.match(swallowedError("a string").message, /\(a string\)/);
  });
});

describe("batch machine: the deadline", () => {
  test("without a budget: batchTimeout", () => {
    assert.deepEqual(deadline(1_000, 60_000, undefined), { ms: 60_000, by: "batchTimeout" });
    assert.deepEqual(deadline(1_000, 60_000, Number.POSITIVE_INFINITY), { ms: 60_000, by: "batchTimeout" });
  });

  test("with a budget: its end plus the grace, or batchTimeout, whichever is sooner", () => {
    assert.equal(BUDGET_GRACE_MS, 2_000);
    assert.deepEqual(deadline(1_000, 60_000, 3_000), { ms: 2_000 + BUDGET_GRACE_MS, by: "budget" });
    assert.deepEqual(deadline(1_000, 3_000, 3_000), { ms: 3_000, by: "batchTimeout" });
    assert.deepEqual(deadline(10_000, 60_000, 3_000), { ms: 1, by: "budget" }, "a budget already spent still gives a positive deadline");
  });

  test("an idleTimeout is honoured as given, or refused when shorter than batchTimeout (never raised)", () => {
    assert.equal(batchSettings({ handler: () => {}, idleTimeout: "90s" }, "run options").idleTimeoutMs, 90_000);
    assert.equal(batchSettings({ handler: () => {}, idleTimeout: "3s", batchTimeout: "3s" }, "run options").idleTimeoutMs, 3_000);
    assert.equal(batchSettings({ handler: () => {} }, "run options").idleTimeoutMs, 0, "unset: keyq sets it past each deadline");
    assert.throws(
      () => batchSettings({ handler: () => {}, idleTimeout: "3s" }, "run options"),
      (e) => e instanceof KeyqError && e.code === "INVALID_INPUT" && e.details.field === "idleTimeout" && /3000 ms/.test(e.message),
    );
  });
});
