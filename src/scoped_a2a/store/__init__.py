"""Task stores: snapshots and append-only event logs (in memory; Redis later)."""
