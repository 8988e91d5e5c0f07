"""The verdicts as JUnit XML, in the shape pytest's `--junitxml` writes (junit_family
xunit2) and CI systems read: one `<testsuites name=...>` holding one `<testsuite>`, one `<testcase>`
per cell — `classname` "<program>.<backend>", `name` the ISA — with a `<failure>` (a
difference: the first divergence in its `message`) or an `<error>` (the cell could not run)."""

from __future__ import annotations

import datetime
import socket
import xml.etree.ElementTree as ET
from collections.abc import Sequence

from emutrace.matrix.verdict import ERROR, FAIL, Verdict

SUITE = "emutrace ci"


def _clean(text: str) -> str:
    """text without the characters XML 1.0 cannot hold (C0 controls but tab, newline, CR)."""
    return "".join(c if c in "\t\n\r" or ord(c) >= 0x20 else f"\\x{ord(c):02x}" for c in text)


def junit_xml(verdicts: Sequence[Verdict], seconds: float) -> bytes:
    failures = sum(v.status == FAIL for v in verdicts)
    errors = sum(v.status == ERROR for v in verdicts)
    stamp = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    attrs = {"name": SUITE, "errors": str(errors), "failures": str(failures), "skipped": "0",
             "tests": str(len(verdicts)), "time": f"{seconds:.3f}"}
    root = ET.Element("testsuites", {"name": SUITE})
    suite = ET.SubElement(root, "testsuite",
                          {**attrs, "timestamp": stamp, "hostname": socket.gethostname()})
    for v in verdicts:
        case = ET.SubElement(suite, "testcase", {
            "classname": f"{v.cell.program}.{v.cell.backend}", "name": v.cell.isa,
            "time": f"{v.outcome.seconds:.3f}"})
        if v.status == FAIL:
            node = ET.SubElement(case, "failure", {"message": _clean(v.message)})
            node.text = _clean("\n".join(v.detail) + f"\ncommand: {' '.join(v.cell.argv)}\n")
        elif v.status == ERROR:
            node = ET.SubElement(case, "error", {"message": _clean(v.message)})
            node.text = _clean(f"command: {' '.join(v.cell.argv)}\n"
                               f"ran on: {v.outcome.where or 'unknown'}\n")
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
