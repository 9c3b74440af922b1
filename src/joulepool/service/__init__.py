"""`pool serve`: the admission service over HTTP (API.md)."""
