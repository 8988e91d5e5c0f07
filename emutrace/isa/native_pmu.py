"""Whether this host exposes a performance-monitoring unit that records taken branches, the
facility a native `bts` would read through perf_event_open(2): Intel's Branch Trace Store
(`intel_bts`, an AUX-area PMU) or the core PMU's Last Branch Records (`cpu`, branch
sampling, PERF_SAMPLE_BRANCH_STACK).  The kernel lists its PMUs in
/sys/bus/event_source/devices (sysfs-bus-event_source-devices); a VM without a virtual PMU
lists neither.  Read by the x86 ISAs' `native_bts` capability and `emutrace info --native`."""

from __future__ import annotations

import os

PMU_DIR = "/sys/bus/event_source/devices"
BRANCH_PMUS = ("intel_bts", "cpu")  # BTS first: it records every branch, LBR samples them


def branch_record_pmus() -> list[str]:
    try:
        listed = set(os.listdir(PMU_DIR))
    except OSError:
        listed = set()
    return [p for p in BRANCH_PMUS if p in listed]


def native_bts_reason() -> str:
    """Why `--target native --backend bts` does not work on this host."""
    pmus = branch_record_pmus()
    if not pmus:
        return (f"no branch-trace PMU on this host ({PMU_DIR} lists neither intel_bts nor a "
                f"core PMU for LBR: a VM without a virtual PMU)")
    return (f"this host has the {pmus[0]} PMU, but reading it through perf_event_open is not "
            f"built (nothing to test it on where it was written)")
