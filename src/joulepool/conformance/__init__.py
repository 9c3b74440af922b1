"""The JSON face of every decision: `pool exec` and the vector runner (CONFORMANCE.md)."""
