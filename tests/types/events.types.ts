// Type proof for typed event maps (issue 21): what must compile does, and
// every `@ts-expect-error` line must be an error (tsc fails on an unused one).
// Checked by `npx tsc -p tests/types/tsconfig.json` (CI) and the main tsconfig; never run.
import * as v from "valibot";
import { type EventOf, keyq, type KeyqEvent, type SendEventOf, type TxDriver } from "../../mod.ts";

declare const driver: TxDriver;

const files = {
  FileCreated: v.object({ path: v.string(), size: v.number() }),
  FileDeleted: v.object({ path: v.string() }),
  // Input and output differ: send takes the input (tag optional), handlers get the output (tag always there).
  FileTagged: v.object({ path: v.string(), tag: v.optional(v.string(), "none") }),
};

/** Any Standard Schema v1 works, not only valibot: a hand-written one that declares its types. */
const hand = {
  "~standard": {
    version: 1 as const,
    vendor: "hand",
    validate: (value: unknown) => ({ value: value as { n: number } }),
    types: undefined as unknown as { input: { n: number }; output: { n: number } },
  },
};

const q = keyq(driver, { events: { files, counters: { Counted: hand } } });

export async function sends(): Promise<void> {
  await q.send("files", { type: "FileCreated", payload: { path: "/a", size: 1 }, key: "t1" });
  await q.send("files", { type: "FileDeleted", payload: { path: "/a" } });
  await q.send("files", { type: "FileTagged", payload: { path: "/a" } });
  await q.send("counters", { type: "Counted", payload: { n: 1 } });
  await q.sendBatch("files", [{ type: "FileCreated", payload: { path: "/a", size: 1 } }, { type: "FileDeleted", payload: { path: "/a" } }]);
  // Untyped queues keep working as before, with or without a payload type.
  await q.send("other", { type: "Anything", payload: 42 });
  await q.send<{ x: number }>("other", { type: "Anything", payload: { x: 1 } });

  // @ts-expect-error an unknown event type
  await q.send("files", { type: "FileCreatd", payload: { path: "/a", size: 1 } });
  // @ts-expect-error a payload of the wrong type's shape (FileCreated needs size)
  await q.send("files", { type: "FileCreated", payload: { path: "/a" } });
  // @ts-expect-error a payload field of the wrong type
  await q.send("files", { type: "FileDeleted", payload: { path: 1 } });
  // @ts-expect-error the tag, when given, is a string
  await q.send("files", { type: "FileTagged", payload: { path: "/a", tag: 1 } });
  // @ts-expect-error a hand-written schema's declared input is checked too
  await q.send("counters", { type: "Counted", payload: { n: "1" } });
  // @ts-expect-error one bad event in a batch
  await q.sendBatch("files", [{ type: "FileDeleted", payload: { path: "/a" } }, { type: "Nope", payload: {} }]);
}

export async function handlers(): Promise<void> {
  await q.consumer("files", "audit").run({
    handler: (ev, tx) => {
      switch (ev.type) {
        case "FileCreated":
          return void (ev.payload.size satisfies number);
        case "FileDeleted":
          // @ts-expect-error FileDeleted has no size
          return void ev.payload.size;
        case "FileTagged":
          return void (ev.payload.tag satisfies string);
        // @ts-expect-error a typo in a case is not one of the types
        case "FileCreatd":
          return void tx;
        default:
          return void (ev satisfies never);
      }
    },
  });
  await q.exclusive("files", "index").batch({
    on: {
      FileCreated: (ev) => void (ev.payload.size satisfies number),
      FileDeleted: (ev, tx) => void tx.query("select $1::text", [ev.payload.path]),
      FileTagged: (ev) => void ev.payload.tag.toUpperCase(),
    },
  });
  await q.ordered("files", "life", { slots: 4 }).work({
    signal: AbortSignal.timeout(1),
    on: {
      FileCreated() {},
      FileDeleted() {},
      // @ts-expect-error the handler map's events are typed per type
      FileTagged: (ev) => void ev.payload.size,
    },
  });
  await q.consumer("files", "partial").run({
    // @ts-expect-error every type of the queue needs its handler in `on`
    on: { FileCreated() {} },
  });
  await q.consumer("files", "typo").run({
    // @ts-expect-error an `on` entry that is not a type of the queue
    on: { FileCreated() {}, FileDeleted() {}, FileTagged() {}, FileMoved() {} },
  });
  await q.consumer("files", "all").run({
    handleBatch: (events, { fail }) => {
      for (const ev of events) if (ev.type === "FileDeleted") fail(ev, new Error("no"));
    },
    onError: (_err, ev: KeyqEvent) => void ev.type,
  });
  await q.consumer("counters", "c").run({ handler: (ev) => void (ev.payload.n satisfies number) });
  // Untyped queues and explicit payload types keep their old types.
  await q.consumer<number>("other", "o").run({ handler: (ev) => void (ev.payload satisfies number) });
}

// The event types are usable on their own, e.g. for a handler defined apart.
type FileEvent = EventOf<typeof files>;
export const describe = (ev: FileEvent): string => (ev.type === "FileCreated" ? `${ev.payload.path} ${ev.payload.size}` : ev.payload.path);
export const outgoing: SendEventOf<typeof files> = { type: "FileDeleted", payload: { path: "/a" } };
// @ts-expect-error SendEventOf refuses an unknown type
export const wrong: SendEventOf<typeof files> = { type: "Nope", payload: { path: "/a" } };

// A client without an event map is untyped, as before.
const plain = keyq(driver);
export const untyped = (): Promise<unknown> => plain.send("files", { type: "Anything", payload: { any: 1 } });
