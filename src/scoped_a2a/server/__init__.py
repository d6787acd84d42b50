"""The server side: the ASGI app, its request handling, and serving under hypercorn."""
