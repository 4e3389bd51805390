"""The HTTP layer: connections and their deadlines, access logs, admission, protocol
negotiation, problem answers, body decoding and limits, API keys, the OpenAPI document."""
