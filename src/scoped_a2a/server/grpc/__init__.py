"""A2A 1.0's gRPC binding, served by the app itself over hypercorn's HTTP/2 (docs/grpc.md).

:mod:`.binding` decodes and routes a call into the one method layer, :mod:`.output` writes the
answer; the error-to-status table (:mod:`...protocol.grpc.status`) and the wire format
(:mod:`...protocol.grpc.framing`) sit in the protocol layer, shared with the client. Only
:mod:`.binding` and :mod:`.output` import protobuf (the ``[grpc]`` extra), and only when an app
serves gRPC.
"""

DEFAULT_MAX_FIELDS = 100_000
"""Protobuf fields a gRPC request message may hold by default (``A2AApp(grpc_max_fields=)``,
``serve --grpc-max-fields``): about 25,000 metadata entries, or 50,000 text parts. Measured at
the cap (2 shared cores): the event loop is held 0.04-0.16 s, depending on the message's shape,
to check, decode and answer it; 400,000 metadata entries held it about 1.4 s (docs/grpc.md)."""
