/** Edits (`application/vnd.toolref.edit`): the request cut into segments, its recipe, the edit
 * against a base the receiver confirmed, its bytes (client_sdk/toolref/edits/ and
 * sending/editor.py, ported byte for byte). */

export { ID_KEY, LARGE, MARK_KEY, SECRET_HEADERS, cutBody, headerLine, headerLines, headerSegment, isSecret, type BodyCut } from "./segments.js";
export {
  ID_BYTES,
  PIECE_MIN,
  PIECE_PREFIX,
  RECIPE_PREFIX,
  RUN_MIN,
  contentOf,
  entryOf,
  isPiece,
  isRecipeRef,
  parsePieceRef,
  pieceEntry,
  pieceRef,
  recipeRef,
  type Entry,
} from "./recipe.js";
export { cut, type Cut } from "./request.js";
export { diff, type Inline, type Keep, type Named, type Op } from "./edit.js";
export { ALONE, GZIP, MIN_COMPRESSED, RAW, pack, platformCodec, varint, type Codec } from "./isolated.js";
export { MEDIA_TYPE, VERSION, WRITTEN, encodeIsolated, encodeV1, writtenAs } from "./wire.js";
export { RECENT_MS, Said } from "./said.js";
export { Entries, KEPT_MS, TOO_MANY_ITEMS, tooManyItems } from "./entries.js";
export { DEFAULT_MAX_BYTES, DEFAULT_MAX_RECIPES, ENTRY_COST, RELATED_MIN, Recipes, type Recipe } from "./recipes.js";
export { ANSWER_FORMATS, AnswerTap, ID_LENGTH, MAX_ANSWER, MAX_STREAM, answerId, tapFor } from "./answer.js";
export {
  DICTIONARY_MISMATCH,
  Editor,
  MAX_RESENDS,
  MISSING_HISTORY,
  MISSING_PIECES,
  asItCameBytes,
  editBytes,
  headerBytes,
  notWorthAnEdit,
  standsAlone,
  type Edit,
} from "./editor.js";
