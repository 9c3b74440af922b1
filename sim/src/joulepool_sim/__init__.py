"""joulepool-sim, `pool simulate`: a trace-driven evaluation of pool/1 against operators' quotas.

A discrete-event replay of a real multi-tenant GPU trace (Microsoft Philly, as Gavel
generated it) under four policies on the same jobs, budgets and wrong estimates: a
device-count quota, a GPU-hour quota (Slurm `GrpTRESMins` style), a grade-blind energy
quota and pool/1. The three energy policies run through the real `Pool` (every decision
`Pool.submit`, every job end `Pool.release`), and each ledger is replayed back, verified,
for the report.

A research tool, so a distribution of its own beside the admission controller's (DESIGN.md
§5): it carries the traces and matplotlib, and joulepool's wheel carries neither.

    trace.py       reading the trace and the VC sizes
    energy.py      each job's duration and modelled energy
    estimates.py   users' wrong estimates (a stated model) and measured releases
    policy.py      the trees and budgets of the four policies
    gpu_hours.py   the GPU-hour quota, which pool/1 cannot express
    engine.py      the event loop, budget periods and earned estimates
    summary.py     one policy's figures, energy read back from its ledger
    evaluation.py  every policy over trace seeds × budgets
    report.py      the Markdown report;  plots.py  its PNG figures
    cli.py         `pool simulate` (the `joulepool.commands` entry point)
    data/traces/   the traces, each source with its licence and commit
"""
