/**
 * The CLI commands over the log and the operator controls: queue settings
 * as flags (create-queue, update-queue), drop-queue, unsubscribe, seek,
 * pause/resume, blocked, skip-head/dead-letter-head, history, replay-key.
 * Destructive commands need --yes; without it they exit 2 and say what they
 * would do.
 *
 * @module
 */
import type { Keyq, QueueSettings, StartPosition } from "../mod.ts";
import { QUEUE_SETTINGS } from "../src/ops/queue-settings.ts";
import { type Args, UsageError } from "./format.ts";
import { queueSettings } from "./status.ts";

/** `maxRetries` → `max-retries`. */
export const kebab = (k: string): string => k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`);

/** The queue-setting flags (`--max-retries`, `--retention`, …); `tables` only when creating. */
export function settingFlags(creating: boolean): string[] {
  return Object.entries(QUEUE_SETTINGS).filter(([, s]) => creating || !s.fixed).map(([k]) => kebab(k));
}

/** Queue settings from their flags: counts as whole numbers, durations as given ("30s", "7d"). */
export function settingsFromFlags(flags: Args["flags"], creating: boolean): QueueSettings {
  const out: Record<string, unknown> = {};
  for (const [k, spec] of Object.entries(QUEUE_SETTINGS)) {
    if (!creating && spec.fixed) continue;
    const v = flags[kebab(k)];
    if (v === undefined) continue;
    if (spec.kind === "count") {
      if (typeof v !== "string" || !/^\d+$/.test(v)) throw new UsageError(`Flag --${kebab(k)} needs a whole number (got "${String(v)}").`);
      out[k] = Number(v);
    } else out[k] = String(v);
  }
  return out as QueueSettings;
}

/** A start position from the command line: latest, earliest, an event id, or an ISO date/time. */
export function position(text: string | undefined, what: string): StartPosition {
  if (text === undefined) throw new UsageError(`Missing ${what}: latest, earliest, an event id, or a date such as 2026-12-01T10:00:00Z.`);
  if (text === "latest" || text === "earliest" || /^\d{1,19}$/.test(text)) return text;
  const d = new Date(text);
  if (/^\d{4}-\d{2}-\d{2}/.test(text) && !Number.isNaN(d.getTime())) return d;
  throw new UsageError(`${what} "${text}" is not a position: give latest, earliest, an event id, or a date such as 2026-12-01T10:00:00Z.`);
}

function need(value: string | undefined, what: string): string {
  if (value === undefined) throw new UsageError(`Missing ${what}; see "keyq --help".`);
  return value;
}

function confirm(flags: Args["flags"], what: string): void {
  if (flags.yes !== true) throw new UsageError(`${what}. Pass --yes to do it.`);
}

type Out = (rows: unknown, columns?: string[]) => void;

/** Runs one of this module's commands; undefined when `command` is not one of them. */
export async function logCommand(q: Keyq, command: string, args: string[], flags: Args["flags"], json: boolean, out: Out): Promise<number | undefined> {
  const queue = () => need(args[0], "a queue name");
  const consumer = () => need(args[1], "a consumer name");
  switch (command) {
    case "create-queue": {
      const created = await q.createQueue(queue(), settingsFromFlags(flags, true));
      out(json ? created.queue : queueSettings(created.queue));
      return 0;
    }
    case "update-queue": {
      const s = settingsFromFlags(flags, false);
      if (Object.keys(s).length === 0) {
        throw new UsageError(`keyq update-queue ${queue()} needs at least one setting flag (${settingFlags(false).map((f) => `--${f}`).join(", ")}).`);
      }
      const info = await q.updateQueue(queue(), s);
      out(json ? info : queueSettings(info));
      return 0;
    }
    case "drop-queue": {
      const name = queue();
      confirm(flags, `drop-queue deletes queue "${name}" with every event, consumer, retry and dead letter`);
      out({ dropped: await q.dropQueue(name) });
      return 0;
    }
    case "unsubscribe": {
      const [qn, cn] = [queue(), consumer()];
      confirm(flags, `unsubscribe removes consumer "${cn}" of queue "${qn}" with its cursor, retries and dead letters`);
      out({ removed: await q.unsubscribe(qn, cn) });
      return 0;
    }
    case "seek": {
      const [qn, cn] = [queue(), consumer()];
      const to = position(args[2], "The target");
      const slot = flags.slot === undefined ? undefined : Number(flags.slot);
      if (slot !== undefined && (typeof flags.slot !== "string" || !/^\d+$/.test(flags.slot))) {
        throw new UsageError(`Flag --slot needs a whole number (got "${String(flags.slot)}").`);
      }
      confirm(flags, `seek moves consumer "${cn}" of queue "${qn}"${slot === undefined ? "" : ` (slot ${slot})`} to ${args[2]} and drops its pending retries`);
      const r = await q.seek(qn, cn, to, slot === undefined ? {} : { slot });
      out(json ? r : { ...r.position, slots: r.slots, "retries dropped": r.retriesDropped, "blocked dropped": r.blockedDropped });
      return 0;
    }
    case "pause":
    case "resume": {
      const [qn, cn] = [queue(), consumer()];
      const changed = command === "pause" ? await q.pause(qn, cn) : await q.resume(qn, cn);
      out({ consumer: cn, paused: command === "pause", changed });
      return 0;
    }
    case "blocked":
      out(await q.blocked(queue(), consumer()), ["slot", "key", "headId", "since", "held"]);
      return 0;
    case "skip-head":
    case "dead-letter-head": {
      const [qn, cn, key] = [queue(), consumer(), need(args[2], "a key")];
      const action = command === "skip-head" ? "skip" : "deadLetter";
      if (action === "skip") confirm(flags, `skip-head drops the failed head event of key "${key}" (consumer "${cn}") without dead-lettering it`);
      out({ key, action, ...(await q.settleHead(qn, cn, key, action)) });
      return 0;
    }
    case "history": {
      const from = flags.from === undefined ? undefined : position(String(flags.from), "--from");
      const limit = flags.limit === undefined ? undefined : Number(flags.limit);
      if (limit !== undefined && !/^\d+$/.test(String(flags.limit))) throw new UsageError(`Flag --limit needs a whole number (got "${String(flags.limit)}").`);
      const rows = await q.history(queue(), need(args[1], "a key"), {
        ...(from === undefined ? {} : { from }),
        ...(limit === undefined ? {} : { limit }),
        ...(flags.after === undefined ? {} : { after: String(flags.after) }),
      });
      out(json ? rows : rows.map((e) => ({ ...e, payload: JSON.stringify(e.payload) })), ["id", "type", "key", "time", "payload", "position"]);
      return 0;
    }
    case "replay-key": {
      const into = flags.into;
      if (typeof into !== "string") throw new UsageError("keyq replay-key <queue> <key> needs --into <consumer>.");
      const from = flags.from === undefined ? undefined : position(String(flags.from), "--from");
      out({ replayed: await q.replayKey(queue(), need(args[1], "a key"), { into, ...(from === undefined ? {} : { from }) }) });
      return 0;
    }
    default:
      return undefined;
  }
}
