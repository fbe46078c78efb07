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
  | "UNKNOWN_EVENT_TYPE"
  | "QUEUE_NOT_FOUND"
  | "QUEUE_EXISTS"
  | "CONSUMER_NOT_FOUND"
  | "CONSUMER_KIND_MISMATCH"
  | "SLOT_COUNT_MISMATCH"
  | "CONSUMER_OPTION_MISMATCH"
  | "DEAD_LETTER_NOT_FOUND"
  | "NOT_MIGRATED"
  | "SCHEMA_TOO_NEW"
  | "FUNCTION_SET_CONFLICT"
  | "TRANSACTIONS_UNSUPPORTED"
  | "WRONG_ISOLATION"
  | "BATCH_ABORTED"
  | "BAD_REPLY"
  | "PREPARED_STATEMENTS_UNSUPPORTED"
  | "PERMISSION_DENIED"
  | "ROLE_NOT_FOUND"
  | "POSITION_OUT_OF_RANGE"
  | "EVENT_NOT_FOUND"
  | "CONSUMER_BUSY"
  | "KEY_NOT_BLOCKED"
  | "DRIVER_NOT_FOUND"
  | "HANDLER_SWALLOWED_FAILURE";

/**
 * The error keyq throws for bad input and engine refusals. Driver and network
 * errors pass through unchanged; when a database error is turned into a
 * `KeyqError` (an engine refusal, a missing schema), the driver's error is
 * kept as `cause`.
 *
 * @example
 * ```ts
 * import { KeyqError } from "@keyq/keyq";
 * try {
 *   throw new KeyqError("QUEUE_NOT_FOUND", 'Queue "files" does not exist; call createQueue("files") first.');
 * } catch (err) {
 *   if (err instanceof KeyqError && err.code === "QUEUE_NOT_FOUND") console.log(err.message, err.cause);
 * }
 * ```
 */
export class KeyqError extends Error {
  /** The stable code, e.g. `"QUEUE_NOT_FOUND"`. */
  readonly code: KeyqErrorCode;
  /** Structured details (the offending field, value, persisted setting…). */
  readonly details: Record<string, unknown>;

  /**
   * Creates an error with a stable `code` and a message that says what to do;
   * `options.cause` is the error it stands for (standard `Error` cause).
   */
  constructor(code: KeyqErrorCode, message: string, details: Record<string, unknown> = {}, options?: { cause?: unknown }) {
    super(message, options);
    this.name = "KeyqError";
    this.code = code;
    this.details = details;
  }
}

/** How one SQLSTATE becomes a KeyqError. */
interface DatabaseRule {
  code: KeyqErrorCode;
  /** Only a missing object named in the schema itself (not migrated), raised at top level. */
  missing?: true;
  /** Postgres refused the role a function or the schema (no keyq grant reaches it), raised at top level. */
  denied?: true;
}

/**
 * The one table from SQLSTATEs to codes. The engine raises `KQ###` with the
 * hint `KEYQ:<CODE>` (the hint names the code; a `KQ` error without one is
 * INVALID_INPUT). A missing schema or engine function means "not migrated",
 * but only at top level: the same codes from inside an engine function (a
 * `where` context) are bugs and pass through. tests/engine-api.test.ts
 * checks every `KQ` raise of the engine against this table.
 */
export const DATABASE_ERRORS: Readonly<Record<string, DatabaseRule>> = {
  KQ001: { code: "QUEUE_NOT_FOUND" },
  KQ002: { code: "CONSUMER_NOT_FOUND" },
  KQ003: { code: "CONSUMER_KIND_MISMATCH" },
  KQ004: { code: "SLOT_COUNT_MISMATCH" },
  KQ005: { code: "DEAD_LETTER_NOT_FOUND" },
  KQ011: { code: "CONSUMER_OPTION_MISMATCH" },
  KQ010: { code: "WRONG_ISOLATION" },
  KQ020: { code: "PERMISSION_DENIED" },
  KQ021: { code: "ROLE_NOT_FOUND" },
  "42501": { code: "PERMISSION_DENIED", denied: true }, // insufficient_privilege: no EXECUTE or USAGE (docs/roles.md)
  KQ030: { code: "POSITION_OUT_OF_RANGE" },
  KQ031: { code: "EVENT_NOT_FOUND" },
  KQ032: { code: "CONSUMER_BUSY" },
  KQ033: { code: "INVALID_INPUT" },
  KQ034: { code: "KEY_NOT_BLOCKED" },
  "3F000": { code: "NOT_MIGRATED", missing: true }, // invalid_schema_name
  "42883": { code: "NOT_MIGRATED", missing: true }, // undefined_function
};

/**
 * Maps a driver error to a `KeyqError` by the table above (the driver error
 * becomes its `cause`) and passes everything else through. `schema`, when
 * given, enables the NOT_MIGRATED rows: the message must name it.
 */
export function fromDatabaseError(err: unknown, schema?: string): unknown {
  if (err instanceof KeyqError) return err;
  const e = err as { code?: unknown; hint?: unknown; message?: unknown; where?: unknown } | null;
  if (!e || typeof e.code !== "string") return err;
  const message = String(e.message ?? "keyq engine error");
  if (e.code.startsWith("KQ")) {
    const hint = typeof e.hint === "string" && e.hint.startsWith("KEYQ:") ? e.hint.slice(5) as KeyqErrorCode : undefined;
    const code = hint ?? DATABASE_ERRORS[e.code]?.code ?? "INVALID_INPUT";
    return new KeyqError(code, message, { sqlstate: e.code }, { cause: err });
  }
  const rule = Object.hasOwn(DATABASE_ERRORS, e.code) ? DATABASE_ERRORS[e.code] : undefined;
  if (rule?.missing && schema !== undefined && !e.where && message.includes(schema)) {
    return new KeyqError(rule.code, `The keyq schema "${schema}" is missing or out of date (${message}); call migrate() first.`, { schema }, {
      cause: err,
    });
  }
  if (rule?.denied && !e.where) {
    return new KeyqError(
      rule.code,
      `${message}: the role has no keyq grant that reaches this call; the schema owner grants one with grant({ role, produce, consume, operate }) (docs/roles.md).`,
      { sqlstate: e.code },
      { cause: err },
    );
  }
  return err;
}
