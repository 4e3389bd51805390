"""The contract both sides share, bit for bit: canonical JSON and refs (`canonical`), wire
models (`models`), the one exception tree (`errors`), body encodings (`encoding`), zstd
against a history (`compression`), protocol versions (`protocol`), numbers read from text
(`numbers`). Depends on nothing else of toolref; everything else may depend on it."""
