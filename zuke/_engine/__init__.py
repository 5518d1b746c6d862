"""The engine: plan a run, schedule its targets, execute their bodies, report transitions.

plan.py       builders -> frozen TargetSpecs; graph validation; the run's Plan
runstate.py   the in-memory state of one run (statuses, meta, outcomes, signals)
context.py    the ctx a body receives
executor.py   calling one body: thread or coroutine, timeout, retry
scheduler.py  launching ready targets up to a concurrency limit; skip, fail, cancel
observer.py   the single transition stream: the state writer first (never dropped), then observers
writer.py     the run's record: serialised, coalesced writes; failures retried, never silent
run.py        execute(): parameters -> plan -> state -> scheduler -> result
"""
