"""Bridges: pool/1 admission for workload managers that already place and run the work."""
