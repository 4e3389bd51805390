/** Errors of the SDK. Each says the fact, the value and the fix. */

export class ToolrefError extends Error {
  override name = "ToolrefError";
}

/** A value has no canonical JSON form (NaN, a lone surrogate, a function, a cycle...). */
export class CanonicalizationError extends ToolrefError {
  override name = "CanonicalizationError";
}

/** SDK misuse: a wrong option or argument. */
export class UsageError extends ToolrefError {
  override name = "UsageError";
}
