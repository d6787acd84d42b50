"""The A2A wire protocol: types, dialects, JSON-RPC envelopes. No I/O in this package."""
