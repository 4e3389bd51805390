/** @toolref/client: toolref for JavaScript (see docs/js.md). */

export { canonicalBytes, canonicalJson, formatNumber } from "./canonical.js";
export { base32 } from "./base32.js";
export { digestKey, sha256, toHex } from "./digest.js";
export { CanonicalizationError, ToolrefError, UsageError } from "./errors.js";
export { REF_LENGTH, REF_PREFIX, invocationBytes, invocationObject, isRef, refOf, type Invocation } from "./ref.js";
export {
  DICTIONARY_LIMIT,
  H0,
  HISTORY_HEADER,
  HISTORY_PREFIX,
  KEEP_HISTORY,
  dictionary,
  heads,
  historyRef,
  isHistoryRef,
  longestConfirmed,
  nextHead,
} from "./history.js";
export { FORMATS, detect, getFormat, type Format, type FormatName } from "./formats/index.js";
export { MARKER, ORDER, fromMarker, payloadKeys, toMarker } from "./formats/site.js";
export { Found, chainForm, fill, rewrite, scan, type Rewrite, type Side } from "./conversation.js";
export { COMPRESS_FROM, gunzip, gzip } from "./compression.js";
export {
  DICTIONARY_MISMATCH,
  MISSING_HISTORY,
  MISSING_REFS,
  PROTOCOL_HEADER,
  PROTOCOL_REFS,
  REFERENCES_HEADER,
} from "./protocol.js";
export { MANAGER_OPTIONS, ToolReferenceManager, type ManagerOptions, type Post, type Savings, type Sent, type Upload } from "./manager.js";
export { toolrefFetch, type ExchangeInfo, type ToolrefFetchOptions } from "./fetch.js";
export { SHARED_ENDPOINTS, forgetSharedState, sharedEndpoints } from "./shared.js";
export { ENDPOINTS, endpoint, type Endpoint } from "./endpoints.js";
export * from "./edits/index.js";
export { withToolRef, type Handler, type ToolRefBackendOptions } from "./backend.js";
export { memberSpans, type MemberSpan } from "./spans.js";
