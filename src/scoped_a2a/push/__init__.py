"""Push notifications: deliver a task's state changes to the caller's webhook, reliably and safely.

- :mod:`.settings`: :class:`PushSettings` (allowed hosts, auth, signing, time bounds).
- :mod:`.guard`: the SSRF guard (which URLs may be used; checked at config time and delivery).
- :mod:`.payload`: the body and headers of a delivery (StreamResponse / 0.3 Task, idempotency
  key, token, authentication, HMAC signature).
- :mod:`.delivery`: one delivery with capped exponential backoff and jitter.
- :mod:`.records`: what happened to each delivery.
- :mod:`.service`: configs, and the per-(task, config) watches in the server nursery.
- :mod:`.rpc`: the JSON-RPC methods.
"""

from .guard import WebhookRefused
from .records import DeliveryRecord
from .service import PushService
from .settings import PushSettings

__all__ = ["DeliveryRecord", "PushService", "PushSettings", "WebhookRefused"]
