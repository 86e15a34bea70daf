"""The built-in OpenAI-compatible simulator gateway (ASGI app served by uvicorn)."""
