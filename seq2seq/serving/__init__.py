"""The HTTP server's parts: request parsing and answers, the batcher that owns the model, the
metrics, and the Starlette application that ties them together."""
