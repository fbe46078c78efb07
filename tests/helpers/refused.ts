/**
 * The one assertion for "this call is refused with KeyqError `code`", shared
 * by the unit tests, the input-contract tests and the driver suites. No
 * database: safe to import from tests/unit.
 *
 * @example
 * ```ts
 * const err = await refused(q.send("bad name!", event), "INVALID_INPUT");
 * assert.match(err.message, /queue/);
 * ```
 */
import assert from "node:assert/strict";
import { KeyqError } from "../../mod.ts";

/** Awaits `p` (or calls it) and returns the KeyqError it threw, checking the code. */
export async function refused(p: Promise<unknown> | (() => unknown), code: string): Promise<KeyqError> {
  try {
    await (typeof p === "function" ? p() : p);
  } catch (err) {
    assert.ok(err instanceof KeyqError, `expected KeyqError ${code}, got ${String(err)}`);
    assert.equal(err.code, code, err.message);
    return err;
  }
  assert.fail(`expected KeyqError ${code}, but the call succeeded`);
}
