// Options merged with their defaults. The rule: a field given as undefined is not given, and its
// default applies, as an option left out does (and as `??` treats the options that stand alone,
// timeoutMs say). Merged by spreading ({...defaults, ...given}), an explicit undefined, which
// TypeScript allows in a Partial, replaced the default: retry {maxAttempts: undefined} retried
// without end, a NaN pause made retries a hot loop or a watch's resume never come, and keepalive
// {timeMs: undefined} turned keepalive off without a word. Every merge of options with defaults
// goes through withDefaults.

/** defaults, with each field of `given` that is not undefined over its default. */
export function withDefaults<T extends object>(defaults: Readonly<T>, given: Partial<T> | undefined): T {
  const out = { ...defaults } as T;
  for (const [key, value] of Object.entries(given ?? {})) {
    if (value !== undefined) (out as Record<string, unknown>)[key] = value;
  }
  return out;
}
