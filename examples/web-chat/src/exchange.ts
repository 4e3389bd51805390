// What one request to /api/chat cost: the shape `toolrefFetch`'s onExchange reports.
export interface Exchange {
  rawBytes: number; // the JSON body useChat built, as it would go without toolref
  wireBytes: number; // what the request put on the wire
  historyRef: string | null; // the recipe the backend kept for the request (tb_...)
  continued?: string | null; // the recipe it was an edit of (only what changed was sent)
  resent: boolean; // sent again after the backend lacked what an edit named
}

export type FetchFunction = typeof globalThis.fetch;

const encoder = new TextEncoder();

// Plain fetch that still reports each request, so the page shows the same table with
// toolref off (`?toolref=off`): raw and wire are then the same bytes.
export function plainFetch(onExchange: (exchange: Exchange) => void): FetchFunction {
  return async (input, init) => {
    const body = init?.body;
    const bytes = typeof body === "string" ? encoder.encode(body).length : 0;
    onExchange({ rawBytes: bytes, wireBytes: bytes, historyRef: null, continued: null, resent: false });
    return globalThis.fetch(input, init);
  };
}
