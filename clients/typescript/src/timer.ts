// Timers of any length, and the check of timing options. setTimeout takes a delay of at most 2^31-1
// ms (about 24.8 days): given more (or Infinity, or NaN), Node fires after 1 ms, so a long deadline
// would fire at once (review of the clients 2, fault 6) and a long pause between retries would
// make them a hot loop.
//
// The rule for the client's timing options: each is checked when the object that takes it is made
// (the client, a watch, an appender; an append's own when it is called), and a value out of its
// range throws a RangeError naming the option and the range. Pauses (retry and watch backoff,
// keepalive) go from 0 (keepalive: 1) to maxTimerMs: a longer one is taken for a mistake, not
// clamped. Deadlines (timeoutMs) go from 0 (none) to Infinity: a long one is honoured, by
// setLongTimeout or as grpc-timeout's longest (client.ts), so only NaN and negative values are
// refused. A pause the client computes (a backoff grown by its multiplier) is held at maxTimerMs.
// An option given as undefined is not given: its default applies (options.ts), so a merged policy
// reaches these checks with every field a number.

/** The longest delay setTimeout honours: 2^31-1 ms. */
export const maxTimerMs = 2 ** 31 - 1;

/** Throws a RangeError naming `option` unless `value` is undefined (not given: its default
 * applies, options.ts) or a number from min to max (NaN never is); `range` says the range in
 * words, for the message. */
export function checkRange(option: string, value: number | undefined, min: number, max: number, range: string): void {
  if (value === undefined || (typeof value === "number" && value >= min && value <= max)) return;
  throw new RangeError(`historyd: ${option} must be ${range}, not ${String(value)}`);
}

/** The range of a pause, in words. */
export const pauseRange = `a number of ms from 0 to ${maxTimerMs} (setTimeout's longest delay)`;

/** The range of a deadline, in words. */
export const deadlineRange = "a number of ms from 0 (none) to Infinity";

/** Throws a RangeError naming `option` unless `value` is undefined or a deadline: 0 (none) to
 * Infinity. */
export function checkDeadline(option: string, value: number | undefined): void {
  checkRange(option, value, 0, Infinity, deadlineRange);
}

/** A timer, cleared with clear(). */
export interface LongTimer {
  clear(): void;
}

/** Calls fn (never before this call returns) once ms have passed by performance.now(), whatever
 * ms is: setTimeout armed for at most `step` ms (maxTimerMs) at a time, and re-armed until the
 * delay is due. A non-finite delay never fires. */
export function setLongTimeout(fn: () => void, ms: number, step: number = maxTimerMs): LongTimer {
  let timer: NodeJS.Timeout | undefined;
  const due = performance.now() + ms;
  const wait = (left: number) => (timer = setTimeout(tick, Math.min(Math.max(Math.ceil(left), 0), step)));
  const tick = () => {
    const left = due - performance.now();
    if (left <= 0) fn();
    else wait(left);
  };
  if (Number.isFinite(ms)) wait(ms);
  return { clear: () => clearTimeout(timer) };
}
