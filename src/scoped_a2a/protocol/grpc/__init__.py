"""A2A 1.0's protobuf messages (``lf.a2a.v1``) for the gRPC binding.

``a2a.proto`` is the specification's file, vendored unchanged; ``a2a_descriptor.py`` is generated
from it by ``scripts/gen_grpc.py`` (never edited by hand); :mod:`.messages` loads it.
"""
