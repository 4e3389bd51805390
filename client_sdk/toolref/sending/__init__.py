"""The sending side: what a client does to send refs and only what is new
(`manager.ToolReferenceManager`, the upload of one turn, transcripts of conversations, and
`transport.Transport` for the official LLM SDKs)."""
