"""Every usage error is one line and exit 64
before the program runs, argparse's own errors and bad numeric options included."""

from __future__ import annotations

import pytest

from emutrace.cli.main import main
from emutrace.errors import EXIT_USAGE

from .conftest import bin_path

CALLS = str(bin_path("x86_64", "calls"))

BAD = [
    ["run", "--timeout", "nan", CALLS],
    ["run", "--timeout", "inf", CALLS],
    ["run", "--timeout", "1e300", CALLS],
    ["run", "--timeout", "-1", CALLS],
    ["run", "--timeout", "soon", CALLS],
    ["run", "--max-insns", "-3", CALLS],
    ["run", "--hw-slots", "0", CALLS],
    ["run", "--bts-buffer", "-1", CALLS],
    ["run", "-D", "-2", CALLS],
    ["run", "--no-such-option", CALLS],
    ["run"],
    ["no-such-command"],
    [],
    ["bench", "--timeout", "nan", "x"],
    ["bench", "--repeat", "0", "x"],
    ["bench", "--ns-per-insn", "nan", "x"],
]


@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a) or "(none)")
def test_usage_error_is_one_line_exit_64(argv: list[str],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("emutrace: usage: ")
    assert "Traceback" not in err


def test_help_still_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["run", "--help"])
    assert e.value.code == 0
    assert "--timeout" in capsys.readouterr().out


def test_bench_report_never_claims_unseen_agreement() -> None:
    """Item 21: with every tracing cell failing, results.md must not say they agreed."""
    from emutrace.benchgrid.report import agreement_sentence

    def rec(backend: str, agreement: str) -> dict[str, object]:
        return {"backend": backend, "agreement": agreement}

    failing = [rec("none", "error"), rec("int3", "error"), rec("step", "error")]
    assert "All" not in agreement_sentence(failing)
    assert "Only 0 of 2" in agreement_sentence(failing)
    assert agreement_sentence([rec("none", "ok"), rec("int3", "ok")]).startswith("All 1 ")
    assert "nothing was compared" in agreement_sentence([rec("none", "ok")])


@pytest.mark.parametrize("argv", [
    ["run", "--trace-after", "login:", CALLS, "recursion"],
    ["run", "--until", "login:", "--append", "quiet", CALLS, "recursion"],
    ["record", "-d", "unused", "--initrd", CALLS, CALLS, "recursion"],
], ids=["trace-after", "until-append", "record-initrd"])
def test_kernel_image_options_without_machine(argv: list[str],
                                              capfd: pytest.CaptureFixture[str]) -> None:
    """A kernel-image option (--trace-after, --until, --append, --initrd, ...) without
    --machine would be ignored: a usage error naming it, before the program runs."""
    assert main(argv) == EXIT_USAGE
    out, err = capfd.readouterr()
    assert out == ""  # (the program printed nothing: it never ran)
    assert err.count("\n") == 1 and "only with --machine" in err, err
    assert all(f"--{o}" in err for o in ("trace-after", "until", "append", "initrd")
               if f"--{o}" in argv)
