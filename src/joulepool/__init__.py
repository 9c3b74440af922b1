"""joulepool: the reference implementation of pool/1, energy-accounted multi-tenant admission."""

__version__ = "0.1.0"
PROFILE = "pool/1"
