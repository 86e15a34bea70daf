"""SQLite persistence (aiosqlite, WAL): schema, batched writer, queries."""
