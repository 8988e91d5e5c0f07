"""Instrumentation mechanisms.  Each backend watches a running CPU and reports raw
:mod:`emutrace.trace.events` to a sink; the shadow stack and the formatters are shared."""
