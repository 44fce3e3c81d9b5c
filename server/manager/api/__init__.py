"""The manager's HTTP API: one module per resource. Handlers parse (``protocol.requests``),
call the service, and return JSON; errors are mapped once by ``runtime.http_api``."""
