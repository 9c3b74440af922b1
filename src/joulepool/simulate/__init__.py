"""`pool simulate`: a trace-driven evaluation of pool/1 against a device-count quota.

A discrete-event replay of a real multi-tenant GPU trace (Microsoft Philly, as Gavel
generated it) through the real `Pool`: every decision is `Pool.submit`, every job end is
`Pool.release`, and the ledger each policy writes is replayed back for the report.

    trace.py       reading the trace and the VC sizes
    energy.py      each job's duration and energy, graded (ModelBased / Estimator)
    policy.py      the two trees: pool/1 and the device-count quota
    engine.py      the event loop
    summary.py     per-VC outcome, energy read back from the ledger
    evaluation.py  one run of both policies over the same jobs
    report.py      the Markdown report;  plots.py  its PNG figures
    cli.py         `pool simulate`
"""
