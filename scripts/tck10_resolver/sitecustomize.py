"""A resolver stub for the conformance kit's runs only (scripts/run_tck10.sh puts this folder on
the served process's PYTHONPATH; nothing else imports it).

The kit's push-config tests register ``https://example.com/...`` webhooks. The server checks where
a webhook points before storing it (SSRF guard, spec §13.2), so on a machine without DNS the
config is refused ("does not resolve"). This makes ``example.com`` resolve to its public address,
as it would with DNS; nothing is ever delivered there (those tests only store, read and delete
configs). Every other name resolves as usual.
"""

import socket

_STUB = {"example.com": "93.184.215.14"}
_real_getaddrinfo = socket.getaddrinfo


def _getaddrinfo(host, port, family=0, type=0, proto=0, flags=0):
    name = host.decode() if isinstance(host, bytes) else host
    if isinstance(name, str) and name.lower().rstrip(".") in _STUB:
        host = _STUB[name.lower().rstrip(".")]
    return _real_getaddrinfo(host, port, family, type, proto, flags)


socket.getaddrinfo = _getaddrinfo
