/** @toolref/client: toolref for JavaScript (see docs/js.md). */

export { canonicalBytes, canonicalJson, formatNumber } from "./canonical.js";
export { base32, fromBase32 } from "./base32.js";
export { digestKey, sha256, sha256Async, toHex } from "./digest.js";
export { CanonicalizationError, ToolrefError, UsageError } from "./errors.js";
export { REF_LENGTH, REF_PREFIX, invocationBytes, invocationObject, isRef, refOf, type Invocation } from "./ref.js";
export { FORMATS, detect, getFormat, type Format, type FormatName } from "./formats/index.js";
export { MARKER, ORDER, fromMarker, payloadKeys, toMarker } from "./formats/site.js";
export { Found, fill, rewrite, scan, type Rewrite, type Side } from "./conversation.js";
export { gunzip, gzip } from "./compression.js";
export {
  EDITS_HEADER,
  EDITS_SINCE,
  HISTORY_HEADER,
  MISSING_REFS,
  PROTOCOL_HEADER,
  PROTOCOL_REFS,
  REFERENCES_HEADER,
  SAVINGS_HEADER,
  savingsValue,
} from "./protocol.js";
export { MANAGER_OPTIONS, RETIRED_OPTIONS, ToolReferenceManager, segmentHeaders, type ManagerOptions, type Post, type Savings, type Sent } from "./manager.js";
export { toolrefFetch, type ExchangeInfo, type ToolrefFetchOptions } from "./fetch.js";
export { SHARED_ENDPOINTS, forgetSharedState, sharedEndpoints } from "./shared.js";
export { ENDPOINTS, endpoint, type Endpoint } from "./endpoints.js";
export { platformZstd, type Zstd } from "./zstd.js";
export { reportChannelsTo } from "./channel/channels.js";
export * from "./edits/index.js";
export { REQUEST_MEDIA_TYPE, parseRequest, withToolRef, type Handler, type ToolRefBackendOptions } from "./backend.js";
export { memberSpans, type MemberSpan } from "./spans.js";
