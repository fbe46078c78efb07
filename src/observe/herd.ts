/**
 * The herd: every listening worker of this process, grouped by queue and
 * consumer, so that one notification wakes one worker, not all of them.
 *
 * Each worker listens on its own driver and hears every notification of its
 * schema; without the herd, N idle workers of a queue all woke for each
 * commit, all sent a tick, and all looked at one event (about 22 statements
 * per event for 4 Tier A workers at 40 events/s). Here a notification is
 * taken once, by payload:
 *
 * - `<queue>:sent:<txid>` (a producer committed): one idle worker of the
 *   queue, of whichever consumer, is woken to tick. The commits heard before
 *   a tick statement is sent are in its snapshot, so a tick covers them;
 *   commits heard while no worker is idle wait as `sent` for the next one
 *   (once: a worker called to tick for them has claimed them).
 * - `<queue>:tick:<id>` (a tick was written): one idle worker of each
 *   consumer is woken to read it. A tick written by a worker of this process
 *   wakes the other consumers at once (its notification, arriving later,
 *   is then known); the worker that wrote it reads it itself.
 * - A batch that received events lets one more idle worker of its consumer
 *   look ({@link Member.more}): a backlog spreads over the workers, one at a
 *   time, and a slow handler never keeps other keys of the window waiting.
 * - A batch that holds all of its consumer's work ({@link Member.cover}: a
 *   Tier B batch locks each slot it visits, so from its start and, once it
 *   read every free slot to its end, until it ends) keeps notifications from
 *   waking another worker of that consumer: its look would find every slot
 *   held and end empty (at 400 events/s, 4 workers over 8 slots, 4 of 10
 *   batches were such looks). Commits wait as `sent` until the batch ends,
 *   then wake one idle worker to tick for them; a tick waits as pending for
 *   the holder, which looks again after its COMMIT.
 *
 * Groups are named by schema, queue and consumer: two databases in one
 * process with the same names share a group. At worst a notification of one
 * is taken as already heard by the other, and that worker polls (the poll
 * back-off stays the backstop of every wait).
 *
 * @module
 */

/**
 * What woke a worker: a tick to read (another session's: a Tier A worker
 * plans it first), commits that need a tick first, or more to read of a
 * tick that a worker of its consumer wrote (and planned) already.
 */
export type Call = "tick" | "sent" | "more";

/** A worker in the herd. */
export interface Member {
  /** Takes what is pending for this worker, or false: `tick` first, then `sent` not yet covered by a tick. */
  take(): Call | false;
  /** While waiting, `wake` is called (once) to end the wait with a call. */
  idle(wake: (call: Call) => void): void;
  /** The wait ended (woken, timed out or aborted). */
  busy(): void;
  /** A notification's payload (already known to be this queue's), with its kind and id. */
  heard(kind: "tick" | "sent", id: string | null): void;
  /**
   * A tick statement is about to be sent; the function it returns takes that
   * tick's id (null: none written) and whether another session held the
   * ticker: then the commits heard are not covered (that session's snapshot
   * may predate them) and the next worker to wait ticks again.
   */
  ticking(): (id: string | null, busy: boolean) => void;
  /** A batch of this worker received events: another idle worker of its consumer may look too. */
  more(): void;
  /**
   * A batch of this worker holds all of its consumer's work until it ends:
   * producers' commits and ticks heard meanwhile wake no worker of the
   * consumer. The function it returns ends that (once): commits still
   * uncovered then wake an idle worker; a tick heard meanwhile waits as
   * pending (the holder looks again after its COMMIT, or takes it at its
   * next wait) unless `wake`: the batch turned out to hold only part of the
   * work, so an idle worker is woken for it at once.
   */
  cover(): (wake?: boolean) => void;
  /**
   * How many ticks of the queue this process heard of or wrote so far: a
   * worker that compares it before its batch and after its COMMIT knows
   * whether a tick came while it held its slot or chunk (then it looks again).
   */
  epoch(): number;
  /** A run starts: the ticks heard so far are read by it. */
  running(): void;
  /** Leaves the herd. */
  leave(): void;
}

/** Remembers the last `size` strings. */
function recent(size: number) {
  const set = new Set<string>();
  return {
    has: (s: string) => set.has(s),
    add(s: string) {
      set.add(s);
      if (set.size > size) set.delete(set.values().next().value!);
    },
  };
}

interface Worker {
  wake: ((call: Call) => void) | undefined;
  group: Group;
}
interface Group {
  workers: Set<Worker>;
  /** A tick heard that no worker of the group has read yet. */
  tickPending: boolean;
  /** Ticks this group knows of (woken for, or written by one of its workers). */
  ticks: ReturnType<typeof recent>;
  /**
   * Tick statements of its workers in flight, and the ticks heard meanwhile:
   * a tick's notification can arrive on a listening connection before the
   * tick statement's own reply, and is this group's own tick or not.
   */
  inflight: number;
  deferred: string[];
  /** Batches of its workers that hold all of its work (Member.cover): commits heard wake none of its workers. */
  covering: number;
}
interface Queue {
  groups: Map<string, Group>;
  /** Producers' commits heard, how many of them a worker was called to tick for, and how many the latest tick statement covers. */
  sent: number;
  claimed: number;
  covered: number;
  /** Tick statements of this process's workers in flight: while one is, commits heard wait for the next. */
  ticking: number;
  commits: ReturnType<typeof recent>;
  /** Ticks heard or written (Member.epoch), each counted once: a tick's own notification follows its writer's reply. */
  epoch: number;
  counted: ReturnType<typeof recent>;
}

const queues = new Map<string, Queue>();

/** Ends the wait of one idle worker of `g` (the `prefer`red one when it is idle); false when none is idle. */
function wakeOne(g: Group, call: Call, prefer?: Worker): boolean {
  let w = prefer?.wake ? prefer : undefined;
  for (const x of g.workers) if (!w && x.wake) w = x;
  if (!w) return false;
  const wake = w.wake!;
  w.wake = undefined;
  wake(call);
  return true;
}

/** A tick for every group of `q` but `except`'s: one idle worker each reads it, or it waits as pending. */
function tickAll(q: Queue, id: string | null, except?: Group, prefer?: Worker): void {
  for (const g of q.groups.values()) {
    if (g === except) continue;
    if (id !== null) {
      if (g.ticks.has(id)) continue;
      if (g.inflight > 0) {
        g.deferred.push(id);
        continue;
      }
      g.ticks.add(id);
    }
    // A batch that holds all of the group's work reads it itself once it ends (the worker looks again after a tick came).
    if (g.covering > 0 || !wakeOne(g, "tick", prefer)) g.tickPending = true;
  }
}

/** Counts tick `id` into the queue's epoch once (null: an engine that sends no id, counted each time). */
function countTick(q: Queue, id: string | null): void {
  if (id !== null && q.counted.has(id)) return;
  if (id !== null) q.counted.add(id);
  q.epoch++;
}

/** A tick statement of `g`'s ended with tick `id` (or none): once none is in flight, the ticks heard meanwhile that were not its own call. */
function settle(q: Queue, g: Group, id: string | null): void {
  g.inflight--;
  if (id !== null) {
    countTick(q, id);
    g.ticks.add(id);
  }
  if (g.inflight > 0) return;
  const heard = g.deferred.filter((d) => !g.ticks.has(d));
  g.deferred = [];
  for (const d of heard) g.ticks.add(d);
  if (heard.length > 0 && (g.covering > 0 || !wakeOne(g, "tick"))) g.tickPending = true;
  if (id !== null) tickAll(q, id, g);
}

/**
 * Joins the herd of `channel` (the schema), `queue` and `consumer`.
 *
 * @example
 * ```ts
 * import { join } from "./herd.ts";
 * const m = join("keyq", "jobs", "mailer");
 * m.heard("sent", "812"); // a producer's commit: an idle worker would tick
 * console.log(m.take()); // "sent": this one was not waiting, so it is pending
 * m.leave();
 * ```
 */
export function join(channel: string, queue: string, consumer: string): Member {
  const qk = `${channel}\u0000${queue}`;
  let q = queues.get(qk);
  if (!q) queues.set(qk, q = { groups: new Map(), sent: 0, claimed: 0, covered: 0, ticking: 0, commits: recent(1024), epoch: 0, counted: recent(256) });
  const queue_ = q;
  let g = q.groups.get(consumer);
  if (!g) q.groups.set(consumer, g = { workers: new Set(), tickPending: false, ticks: recent(256), inflight: 0, deferred: [], covering: 0 });
  const me: Worker = { wake: undefined, group: g };
  g.workers.add(me);
  // One worker ticks for the commits heard so far: the others need not (its tick's own wake-up follows).
  // While a tick statement of the process is in flight, the commits heard wait for it to end: then one
  // worker ticks for all of them (under a steady stream, ticks follow the ticker's pace, not each commit).
  const anyIdle = (): void => {
    if (queue_.ticking > 0) return;
    for (const x of queue_.groups.values()) {
      if (x.covering === 0 && wakeOne(x, "sent", me)) return void (queue_.claimed = queue_.sent);
    }
  };
  const uncovered = (): boolean => queue_.sent > Math.max(queue_.covered, queue_.claimed);
  return {
    take() {
      if (me.group.tickPending && me.group.covering === 0) {
        me.group.tickPending = false;
        return "tick";
      }
      if (queue_.ticking > 0 || me.group.covering > 0 || !uncovered()) return false;
      queue_.claimed = queue_.sent;
      return "sent";
    },
    idle(wake) {
      me.wake = wake;
    },
    busy() {
      me.wake = undefined;
    },
    heard(kind, id) {
      if (kind === "sent") {
        if (id !== null) {
          if (queue_.commits.has(id)) return;
          queue_.commits.add(id);
        }
        queue_.sent++;
        anyIdle(); // none idle: the next to wait takes it (take() sees sent > covered)
      } else {
        countTick(queue_, id);
        tickAll(queue_, id, undefined, me);
      }
    },
    ticking() {
      const covers = queue_.sent;
      const g = me.group;
      g.inflight++;
      queue_.ticking++;
      let once = false;
      return (id, busy) => {
        if (once) return;
        once = true;
        queue_.ticking--;
        if (id === null && busy) queue_.claimed = Math.min(queue_.claimed, queue_.covered);
        else queue_.covered = Math.max(queue_.covered, covers);
        settle(queue_, g, id);
        // Commits heard while it ran: one idle worker ticks for them (after a busy tick, this worker tries again itself).
        if (!busy && uncovered()) anyIdle();
      };
    },
    more() {
      wakeOne(me.group, "more");
    },
    cover() {
      const g = me.group;
      g.covering++;
      let once = false;
      return (wake) => {
        if (once) return;
        once = true;
        g.covering--;
        if (g.covering > 0) return;
        // A worker that left (its work() stopped) will not look again: an idle one reads the tick instead.
        if ((wake || !g.workers.has(me)) && g.tickPending && wakeOne(g, "tick")) g.tickPending = false;
        if (uncovered()) anyIdle();
      };
    },
    epoch: () => queue_.epoch,
    running() {
      me.group.tickPending = false;
    },
    leave() {
      me.wake = undefined;
      me.group.workers.delete(me);
      if (me.group.workers.size > 0) return;
      queue_.groups.delete(consumer);
      if (queue_.groups.size === 0) queues.delete(qk);
    },
  };
}
