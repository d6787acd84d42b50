"""A2A 1.0's gRPC binding, served by the app itself over hypercorn's HTTP/2 (docs/grpc.md).

:mod:`.binding` decodes and routes a call into the one method layer, :mod:`.output` writes the
answer, :mod:`.errors` maps errors to gRPC statuses, :mod:`.framing` is the wire format. Only
:mod:`.binding` and :mod:`.output` import protobuf (the ``[grpc]`` extra), and only when an app
serves gRPC.
"""
