"""Rigs of the Slurm tests: a test Slurm, the bridge in it, simulated exporters."""
