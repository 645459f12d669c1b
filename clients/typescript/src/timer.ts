// Timers of any length. setTimeout takes a delay of at most 2^31-1 ms (about 24.8 days): given more
// (or Infinity), Node warns (TimeoutOverflowWarning) and fires after 1 ms, so a long deadline
// would fire at once (review of the clients 2, fault 6).

/** The longest delay setTimeout honours: 2^31-1 ms. */
export const maxTimerMs = 2 ** 31 - 1;

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
