"""The receiving side: what a backend does with a request before its app sees it: an edit
restored through the registry (`restoring`), `toolRef` markers hydrated (`hydrator`), both
behind `middleware.ToolRefMiddleware`."""
