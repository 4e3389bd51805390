"""Edits: a request sent as a base the registry holds plus what changed.

A request (its headers, then its body) is cut into segments (`segments`): each message of
its conversation, each large member of its body, and the glue between them, so that their
concatenation is the request, byte for byte. A segment of `PIECE_MIN` bytes or more is a
piece, content-addressed (`tp_` + the first 16 bytes of its SHA-256); a shorter one stays a
literal. The list of them (`Recipe`) names the request (`tb_` ref), and a registry that
holds a recipe holds its pieces.

A turn is sent as an edit of any recipe the registry confirmed (`edit`): ranges of the
base kept, pieces named, new segments inline, the inline bytes compressed against the
base's segments the edit removed and the base's end (`dictionary`). The registry applies
it in time linear in the edit and the pieces it names, and answers a miss with exactly the
pieces it lacks. What a turn costs depends on what changed, not where: a message edited in
the middle, a cache mark that moves, a call never answered, a conversation interleaved
with others.

Everything here is pure: no I/O, no clock. `wire` is the body's byte format.
"""
