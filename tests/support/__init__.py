"""Test rigs: real servers, simulated hardware, builders of ledgers."""
