/**
 * Typed errors with stable codes. Messages are sentence case, name the value
 * and say what to do; `code` is what programs should switch on.
 *
 * @module
 */

/** Every error code keyq raises. Codes are stable across releases. */
export type KeyqErrorCode =
  | "INVALID_IDENTIFIER"
  | "INVALID_INPUT"
  | "INVALID_PAYLOAD"
  | "QUEUE_NOT_FOUND"
  | "QUEUE_EXISTS"
  | "CONSUMER_NOT_FOUND"
  | "CONSUMER_KIND_MISMATCH"
  | "SLOT_COUNT_MISMATCH"
  | "DEAD_LETTER_NOT_FOUND"
  | "NOT_MIGRATED"
  | "SCHEMA_TOO_NEW"
  | "TRANSACTIONS_UNSUPPORTED"
  | "WRONG_ISOLATION"
  | "BATCH_ABORTED"
  | "BAD_REPLY"
  | "PREPARED_STATEMENTS_UNSUPPORTED";

/**
 * The error keyq throws for bad input and engine refusals. Driver and network
 * errors pass through unchanged.
 *
 * @example
 * ```ts
 * import { KeyqError } from "keyq";
 * try {
 *   throw new KeyqError("QUEUE_NOT_FOUND", 'Queue "files" does not exist; call createQueue("files") first.');
 * } catch (err) {
 *   if (err instanceof KeyqError && err.code === "QUEUE_NOT_FOUND") console.log(err.message);
 * }
 * ```
 */
export class KeyqError extends Error {
  /** The stable code, e.g. `"QUEUE_NOT_FOUND"`. */
  readonly code: KeyqErrorCode;
  /** Structured details (the offending field, value, persisted setting…). */
  readonly details: Record<string, unknown>;

  /** Creates an error with a stable `code` and a message that says what to do. */
  constructor(code: KeyqErrorCode, message: string, details: Record<string, unknown> = {}) {
    super(message);
    this.name = "KeyqError";
    this.code = code;
    this.details = details;
  }
}

/**
 * The engine raises SQLSTATE `KQ###` with a `KEYQ:CODE` hint; this maps such
 * a driver error to a `KeyqError` and passes everything else through.
 */
export function fromDatabaseError(err: unknown): unknown {
  const e = err as { code?: unknown; hint?: unknown; message?: unknown } | null;
  if (!e || typeof e.code !== "string" || !e.code.startsWith("KQ")) return err;
  const hint = typeof e.hint === "string" ? e.hint : "";
  const code = hint.startsWith("KEYQ:") ? hint.slice(5) : "INVALID_INPUT";
  return new KeyqError(code as KeyqErrorCode, String(e.message ?? "keyq engine error"), { sqlstate: e.code });
}
